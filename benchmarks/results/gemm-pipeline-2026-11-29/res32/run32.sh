#!/bin/bash
# NVIDIA OpenCL: GPU_PIPELINE and its neighbours with the restructured slice loop, 4096^3
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res32; mkdir -p $R; cp .gpu/run32.sh .gpu/probe_gemm.py $R/
DEVICELAYER_CACHE=/tmp/dlc-p timeout 90 python3 .gpu/probe_gemm.py opencl:0 --n 4096 --micro 8 --variant default --variant G-novec --variant G-nosw --variant G-s1 --variant G-novec-s1 --variant G-nopf > $R/probe.log 2>&1; echo "probe rc=$?" >> $R/rc.txt
cat $R/probe.log $R/rc.txt
cd $OUT && tar -czf res32.tgz res32 && rm -rf res32

#!/bin/bash
# the final kernel: GPU_PIPELINE (default) and the plain kernel at edges 8 and 4, 4096^3
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res31; mkdir -p $R; cp .gpu/run31.sh .gpu/probe_gemm.py $R/
DEVICELAYER_CACHE=/tmp/dlc-p timeout 90 python3 .gpu/probe_gemm.py opencl:0 vulkan:0 --n 4096 --micro 8 --micro 4 --variant default --variant plain > $R/probe.log 2>&1; echo "probe rc=$?" >> $R/rc.txt
cat $R/probe.log $R/rc.txt
cd $OUT && tar -czf res31.tgz res31 && rm -rf res31

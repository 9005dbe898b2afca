#!/bin/bash
# the K loop unrolled in the GPU pipeline, micro-tile edge 8, 4096^3
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res25; mkdir -p $R; cp .gpu/run25.sh .gpu/probe_gemm.py $R/
DEVICELAYER_CACHE=/tmp/dlc-p timeout 150 python3 .gpu/probe_gemm.py opencl:0 vulkan:0 --n 4096 --micro 8 --variant default --variant G-unroll --variant G-unroll-s1 --variant G-unroll-novec --variant default > $R/probe8.log 2>&1; echo "probe8 rc=$?" >> $R/rc.txt
cat $R/probe8.log $R/rc.txt
cd $OUT && tar -czf res25.tgz res25 && rm -rf res25

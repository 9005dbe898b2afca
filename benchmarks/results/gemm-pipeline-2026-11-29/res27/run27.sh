#!/bin/bash
# the GEMM kernel's UNROLL hints kept everywhere, nowhere, on the multiply-adds only, on the memory loops only
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res27; mkdir -p $R; cp .gpu/run27.sh .gpu/probe_gemm.py $R/
DEVICELAYER_CACHE=/tmp/dlc-p timeout 200 python3 .gpu/probe_gemm.py opencl:0 vulkan:0 --n 4096 --micro 8 > $R/probe8.log 2>&1; echo "probe8 rc=$?" >> $R/rc.txt
cat $R/probe8.log $R/rc.txt
cd $OUT && tar -czf res27.tgz res27 && rm -rf res27

#!/bin/bash
# the tiled GEMM's pipelines forced one by one on NVIDIA's OpenCL and Vulkan, against cuBLAS
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res22; mkdir -p $R; cp .gpu/run22.sh .gpu/probe_gemm.py $R/
nvidia-smi > $R/gpu.txt 2>&1
DEVICELAYER_CACHE=/tmp/dlc-p timeout 420 python3 .gpu/probe_gemm.py opencl:0 vulkan:0 --n 4096 --n 2048 --micro 8 > $R/probe8.log 2>&1; echo "probe8 rc=$?" >> $R/rc.txt
DEVICELAYER_CACHE=/tmp/dlc-p timeout 100 python3 .gpu/probe_gemm.py opencl:0 vulkan:0 --n 4096 --micro 4 --variant plain --variant vec --variant vec-al-pf-s2-sw8 --variant vec-al-s2-sw8 > $R/probe4.log 2>&1; echo "probe4 rc=$?" >> $R/rc.txt
cat $R/probe8.log $R/probe4.log | tail -80; cat $R/rc.txt
cd $OUT && tar -czf res22.tgz res22 && rm -rf res22

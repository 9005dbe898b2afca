#!/bin/bash
# the tiled GEMM's pipelines (FMA, K slices, runs) on NVIDIA's OpenCL and Vulkan against cuBLAS; OpenCL built
# with and without -cl-mad-enable: ResNet-50's convolutions and ResNet-50 b16 against eager
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res23; mkdir -p $R; cp .gpu/run23.sh .gpu/probe_gemm.py .gpu/mad.py $R/
nvidia-smi > $R/gpu.txt 2>&1
DEVICELAYER_CACHE=/tmp/dlc-p timeout 300 python3 .gpu/probe_gemm.py opencl:0 vulkan:0 --n 4096 --micro 8 > $R/probe8.log 2>&1; echo "probe8 rc=$?" >> $R/rc.txt
cat $R/probe8.log
C="--device opencl:0 --gemm 4096 --conv r50-3x3-64 --conv r50-3x3-256 --conv r50-1x1-256-64 --conv r50-1x1-1024-256 --rounds 3"
for m in 0 1; do MAD=$m DEVICELAYER_CACHE=/tmp/dlc-m$m timeout 100 python3 .gpu/mad.py benchmarks.tile_tuning $C --out $R/tiles-mad$m > $R/tiles-mad$m.log 2>&1; echo "tiles mad$m rc=$?" >> $R/rc.txt; done
for m in 0 1; do MAD=$m DEVICELAYER_CACHE=/tmp/dlc-r$m timeout 120 python3 .gpu/mad.py benchmarks.gpu_vs_torch --device opencl:0 --model resnet50 --batch 16 --compile none --seconds 1 --out $R/r50-mad$m > $R/r50-mad$m.log 2>&1; echo "r50 mad$m rc=$?" >> $R/rc.txt; done
grep -h "gemm\|r50" $R/tiles-mad*.log | grep "│" | cut -c1-160
grep -h "float32" $R/r50-mad*.log | cut -c1-250
cat $R/rc.txt
cd $OUT && tar -czf res23.tgz res23 && rm -rf res23

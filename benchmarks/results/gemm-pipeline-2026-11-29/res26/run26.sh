#!/bin/bash
# the tiled convolution's pipelines on NVIDIA's OpenCL and Vulkan (ResNet-50's convolutions, batch 16); the
# landed tree's tiled kernels (378e9ee) on the same cases
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res26; mkdir -p $R /tmp/before; tar -xzf .gpu/before-378.tar.gz -C /tmp/before; cp .gpu/run26.sh .gpu/probe_conv.py $R/
C="--conv r50-3x3-64 --conv r50-3x3-256 --conv r50-1x1-256-64 --conv r50-1x1-1024-256"
DEVICELAYER_CACHE=/tmp/dlc-c timeout 240 python3 .gpu/probe_conv.py opencl:0 vulkan:0 $C --variant plain --variant s2 --variant k8-s2 --variant R-vec-s2 --variant R-vec-k8-s2 > $R/conv.log 2>&1; echo "conv rc=$?" >> $R/rc.txt
cat $R/conv.log
(cd /tmp/before && DEVICELAYER_CACHE=/tmp/dlc-b PYTHONPATH=/tmp/site:/tmp/before timeout 150 python3 -m benchmarks.tile_tuning --device opencl:0 --device vulkan:0 --gemm 4096 $C --rounds 3 --out $R/before > $R/before.log 2>&1; echo "before rc=$?" >> $R/rc.txt)
grep "│" $R/before.log | cut -c1-170
cat $R/rc.txt
cd $OUT && tar -czf res26.tgz res26 && rm -rf res26

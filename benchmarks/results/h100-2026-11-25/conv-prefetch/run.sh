#!/bin/bash
# tiled GEMM/convolution kernels with register prefetch: tile benchmark and ResNet-50 b16 on NVIDIA OpenCL and Vulkan,
# landed tree (before) against the working tree (after)
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res; mkdir -p $R/before $R/after /tmp/before
tar -xzf .gpu/before.tar.gz -C /tmp/before
nvidia-smi -L > $R/machine.txt 2>&1; lscpu | grep "Model name" >> $R/machine.txt
T="--device opencl:0 --device vulkan:0 --rounds 3 --budget 0.2"
M="--device opencl:0 --device vulkan:0 --model resnet50 --batch 16 --compile none --seconds 2"
( cd /tmp/before && export PYTHONPATH=/tmp/site:/tmp/before DEVICELAYER_CACHE=/tmp/dlc-before
  timeout 110 python3 -m benchmarks.tile_tuning $T --out $R/before > $R/before/tiles.log 2>&1; echo "before tiles rc=$?" >> $R/rc.txt
  timeout 90 python3 -m benchmarks.gpu_vs_torch $M --out $R/before/m1 > $R/before/m1.log 2>&1; echo "before m1 rc=$?" >> $R/rc.txt
  timeout 60 python3 -m benchmarks.gpu_vs_torch $M --out $R/before/m2 > $R/before/m2.log 2>&1; echo "before m2 rc=$?" >> $R/rc.txt )
export DEVICELAYER_CACHE=/tmp/dlc-after
timeout 110 python3 -m benchmarks.tile_tuning $T --out $R/after > $R/after/tiles.log 2>&1; echo "after tiles rc=$?" >> $R/rc.txt
timeout 90 python3 -m benchmarks.gpu_vs_torch $M --out $R/after/m1 > $R/after/m1.log 2>&1; echo "after m1 rc=$?" >> $R/rc.txt
timeout 60 python3 -m benchmarks.gpu_vs_torch $M --out $R/after/m2 > $R/after/m2.log 2>&1; echo "after m2 rc=$?" >> $R/rc.txt
tar -czf $OUT/res.tgz -C /tmp res

#!/bin/bash
# tiled kernels: micro-tile runs of 4 adjacent rows/columns and rows padded by 4 (after) against HEAD (before)
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res; mkdir -p $R/before $R/after /tmp/before
tar -xzf .gpu/before.tar.gz -C /tmp/before
nvidia-smi -L > $R/machine.txt 2>&1; lscpu | grep "Model name" >> $R/machine.txt
T="--device opencl:0 --device vulkan:0 --rounds 2 --budget 0.2"
M="--device opencl:0 --device vulkan:0 --model resnet50 --batch 16 --compile none --seconds 2"
( cd /tmp/before && export PYTHONPATH=/tmp/site:/tmp/before DEVICELAYER_CACHE=/tmp/dlc-before
  timeout 100 python3 -m benchmarks.tile_tuning $T --out $R/before > $R/before/tiles.log 2>&1; echo "before tiles rc=$?" >> $R/rc.txt
  timeout 80 python3 -m benchmarks.gpu_vs_torch $M --out $R/before/m1 > $R/before/m1.log 2>&1; echo "before m1 rc=$?" >> $R/rc.txt )
export DEVICELAYER_CACHE=/tmp/dlc-after
timeout 100 python3 -m benchmarks.tile_tuning $T --out $R/after > $R/after/tiles.log 2>&1; echo "after tiles rc=$?" >> $R/rc.txt
timeout 80 python3 -m benchmarks.gpu_vs_torch $M --out $R/after/m1 > $R/after/m1.log 2>&1; echo "after m1 rc=$?" >> $R/rc.txt
tar -czf $OUT/res.tgz -C /tmp res

#!/bin/bash
# GLSL storage buffers declared restrict or not: the GEMM and ResNet-50's convolutions on NVIDIA's Vulkan
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res27b; mkdir -p $R; cp .gpu/run27b.sh .gpu/restrict.py $R/
C="--device vulkan:0 --gemm 4096 --conv r50-3x3-64 --conv r50-3x3-256 --conv r50-1x1-256-64 --conv r50-1x1-1024-256 --rounds 3"
for m in 0 1 0 1; do RESTRICT=$m DEVICELAYER_CACHE=/tmp/dlc-r$m timeout 80 python3 .gpu/restrict.py benchmarks.tile_tuning $C --out $R/tiles-r$m > $R/tiles-r$m.log 2>&1; echo "restrict $m rc=$?" >> $R/rc.txt; grep "│" $R/tiles-r$m.log | cut -c1-170; done
cat $R/rc.txt
cd $OUT && tar -czf res27b.tgz res27b && rm -rf res27b

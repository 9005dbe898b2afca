#!/bin/bash
# 64-deep K slices for the MMA form at 64 x 64 and 128 x 128 tiles: ResNet-50's convolutions (float16, batch 16) and products at 64 x 64 tiles on vulkan:0
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res119; mkdir -p $R; cp .gpu/run119.sh .gpu/probe_conv16.py .gpu/probe_words.py $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res119.tgz -C /tmp res119; }
V="--variant default --variant m8 --variant m4-k64s1 --variant m4-k64s2 --variant m8-k64s1 --variant m4-k32s1"
DEVICELAYER_CACHE=/tmp/dlc-a timeout 200 python3 .gpu/probe_conv16.py --dtype float16 $V > $R/conv.log 2>&1; echo "conv rc=$?" >> $R/rc.txt; pk
DEVICELAYER_CACHE=/tmp/dlc-b timeout 150 python3 .gpu/probe_words.py --micro 4 --n 1024 --n 4096 --shape 2048,768,768 --shape 2048,768,3072 --shape 2048,3072,768 --shape 512,512,4608 --variant default --variant k64s1 --variant k64s2 --variant k32 --variant s1 > $R/gemm4.log 2>&1; echo "gemm4 rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; grep -E "sums" $R/conv.log; grep -E "GEMM|  " $R/gemm4.log | cut -c1-110

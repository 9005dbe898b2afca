#!/bin/bash
# diagnosis: ResNet-50's convolutions at batch 16 on vulkan:0 in float16 (matrix units) and float32: plans and ms per variant against cuDNN
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res117; mkdir -p $R; cp .gpu/run117.sh .gpu/probe_conv16.py $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res117.tgz -C /tmp res117; }
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
DEVICELAYER_CACHE=/tmp/dlc-a timeout 200 python3 .gpu/probe_conv16.py --dtype float16 > $R/probe16.log 2>&1; echo "probe16 rc=$?" >> $R/rc.txt; pk
DEVICELAYER_CACHE=/tmp/dlc-b timeout 120 python3 .gpu/probe_conv16.py --dtype float32 --variant default --variant m8 --variant m4-nosplit > $R/probe32.log 2>&1; echo "probe32 rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; grep -E "^conv|sums" $R/probe16.log $R/probe32.log | cut -c1-200

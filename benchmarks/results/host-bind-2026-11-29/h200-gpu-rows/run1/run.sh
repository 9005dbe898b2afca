#!/bin/bash
# the issue's GPU rows (ResNet-50 and BERT, batch 1 and 16, float32, against PyTorch eager): df3b175 (stop 32's
# landed tree) and the working tree, one after the other on one machine
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res5; mkdir -p $R /tmp/before; tar -xzf .gpu/before-df3.tar.gz -C /tmp/before
cp .gpu/run5.sh $R/run.sh
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1; lscpu | grep -E "Model name|^CPU\(s\)" >> $R/gpu.txt
G="--device cuda:0 --device opencl:0 --device vulkan:0 --model resnet50 --model bert --batch 1 --batch 16 --compile none --seconds 1"
(cd /tmp/before && DEVICELAYER_CACHE=/tmp/dlc-b PYTHONPATH=/tmp/site:/tmp/before timeout 270 python3 -m benchmarks.gpu_vs_torch $G --out $R/before > $R/before.log 2>&1; echo "before rc=$?" >> $R/rc.txt)
(DEVICELAYER_CACHE=/tmp/dlc-a timeout 270 python3 -m benchmarks.gpu_vs_torch $G --out $R/after > $R/after.log 2>&1; echo "after rc=$?" >> $R/rc.txt)
cat $R/rc.txt; grep -E "float32: " $R/before.log $R/after.log | cut -c1-400

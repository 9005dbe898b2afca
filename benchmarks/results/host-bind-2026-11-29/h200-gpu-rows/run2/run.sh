#!/bin/bash
# the GPU rows again, BERT at batch 1 and 16 (the first run's before tree lacked a benchmark module):
# df3b175 and the working tree alternating, two rounds, on one machine
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res6; mkdir -p $R /tmp/before; tar -xzf .gpu/before-df3.tar.gz -C /tmp/before
cp .gpu/run6.sh $R/run.sh
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
G="--device cuda:0 --device opencl:0 --device vulkan:0 --model bert --batch 1 --batch 16 --compile none --seconds 1"
for k in 1 2; do
(cd /tmp/before && DEVICELAYER_CACHE=/tmp/dlc-b PYTHONPATH=/tmp/site:/tmp/before timeout 120 python3 -m benchmarks.gpu_vs_torch $G --out $R/before$k > $R/before$k.log 2>&1; echo "before $k rc=$?" >> $R/rc.txt)
(DEVICELAYER_CACHE=/tmp/dlc-a timeout 120 python3 -m benchmarks.gpu_vs_torch $G --out $R/after$k > $R/after$k.log 2>&1; echo "after $k rc=$?" >> $R/rc.txt)
done
cat $R/rc.txt; grep -E "float32: " $R/before*.log $R/after*.log | cut -c1-330

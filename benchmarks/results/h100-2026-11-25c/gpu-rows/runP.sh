#!/bin/bash
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
export DEVICELAYER_CACHE=/tmp/dlc-p
mkdir -p /tmp/before /tmp/res && tar -xzf .gpu/before.tar.gz -C /tmp/before
G="--device cuda:0 --device opencl:0 --device vulkan:0 --model resnet50 --model bert --batch 1 --batch 16 --compile none --seconds 1"
(cd /tmp/before && PYTHONPATH=/tmp/site:/tmp/before timeout 280 python3 -m benchmarks.gpu_vs_torch $G --out /tmp/res/before > /tmp/res/before.log 2>&1; echo "before rc=$?" >> /tmp/res/rc.txt)
tar -czf $OUT/res.tgz -C /tmp res
(timeout 280 python3 -m benchmarks.gpu_vs_torch $G --out /tmp/res/after > /tmp/res/after.log 2>&1; echo "after rc=$?" >> /tmp/res/rc.txt)
tar -czf $OUT/res.tgz -C /tmp res

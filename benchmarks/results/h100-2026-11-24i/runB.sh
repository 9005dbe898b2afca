#!/bin/bash
# ResNet-50 and EfficientNet-B0 at batch 16 on NVIDIA OpenCL and Vulkan: tile tuning off, then on (first: tunes),
# then on again (stored choices)
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
export DEVICELAYER_CACHE=/tmp/dlc-b
mkdir -p $OUT/off $OUT/on $OUT/on2
args="--device opencl:0 --device vulkan:0 --model resnet50 --model efficientnet_b0 --batch 16 --compile none --seconds 2"
DEVICELAYER_TUNE=0 timeout 200 python3 -m benchmarks.gpu_vs_torch $args --out $OUT/off > $OUT/off/log.txt 2>&1
echo "off rc=$?" > $OUT/rc.txt
timeout 250 python3 -m benchmarks.gpu_vs_torch $args --out $OUT/on > $OUT/on/log.txt 2>&1
echo "on rc=$?" >> $OUT/rc.txt
timeout 130 python3 -m benchmarks.gpu_vs_torch $args --out $OUT/on2 > $OUT/on2/log.txt 2>&1
echo "on2 rc=$?" >> $OUT/rc.txt
cp -r $DEVICELAYER_CACHE/tuned $OUT/tuned 2>/dev/null

#!/bin/bash
# the CNN rows not measured in res84/res86: float32 ResNet-50, EfficientNet-B0, MobileNetV2, ConvNeXt-T; MobileNetV2 float16
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res87; mkdir -p $R; cp .gpu/run87.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res87.tgz -C /tmp res87; }
timeout 50 python3 -m benchmarks.gpu_vs_torch --model mobilenet_v2 --batch 1 --batch 16 --dtype float16 --compile reduce-overhead --seconds 0.4 --out $R/mnv2-16 > $R/mnv2-16.log 2>&1; echo "mnv2 16 rc=$?" >> $R/rc.txt; pk
for m in resnet50 efficientnet_b0 mobilenet_v2 convnext_tiny; do
timeout 50 python3 -m benchmarks.gpu_vs_torch --model $m --batch 1 --batch 16 --dtype float32 --compile reduce-overhead --seconds 0.4 --out $R/$m-32 > $R/$m-32.log 2>&1; echo "$m 32 rc=$?" >> $R/rc.txt; pk
done
cat $R/rc.txt; grep -h " float" $R/*.log | cut -c1-150

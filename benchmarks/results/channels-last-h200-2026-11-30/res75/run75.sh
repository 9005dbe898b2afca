#!/bin/bash
# CNNs float32 vs torch.compile (channels-last convolutions and cuDNN pools in the tree)
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res75; mkdir -p $R; cp .gpu/run75.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res75.tgz -C /tmp res75; }
timeout 270 python3 -m benchmarks.gpu_vs_torch --model resnet50 --model efficientnet_b0 --model mobilenet_v2 --model convnext_tiny --batch 1 --batch 16 --dtype float32 --compile reduce-overhead --seconds 1.0 --out $R/vs > $R/vs.log 2>&1; echo "vs rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; grep " float" $R/vs.log | cut -c1-140

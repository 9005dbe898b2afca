#!/bin/bash
# the CNN rows against torch.compile (reduce-overhead), float32, batch 1 and 16, final code
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res65; mkdir -p $R; cp .gpu/run65.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res65.tgz -C /tmp res65; }
timeout 220 python3 -m benchmarks.gpu_vs_torch --model resnet50 --model mobilenet_v2 --model efficientnet_b0 --batch 1 --batch 16 --dtype float32 --compile reduce-overhead --seconds 0.6 --out $R/vs > $R/vs.log 2>&1; echo "vs rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; grep " float" $R/vs.log | cut -c1-200; tail -5 $R/vs.log | cut -c1-300

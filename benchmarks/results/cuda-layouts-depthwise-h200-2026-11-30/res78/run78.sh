#!/bin/bash
# pointwise chains vs PyTorch; float16 GELU chains as one gelu; CNNs + transformers float32 vs torch.compile
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res78; mkdir -p $R; cp .gpu/run78.sh .gpu/probe_pointwise.py $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res78.tgz -C /tmp res78; }
timeout 100 python3 .gpu/probe_pointwise.py > $R/pointwise.log 2>&1; echo "pointwise rc=$?" >> $R/rc.txt; pk
timeout 70 python3 -m benchmarks.cuda_item_times --arch convnext_tiny --dtype float16 --batch 16 --top 6 > $R/items-cnx-fp16-b16.log 2>&1; echo "items cnx rc=$?" >> $R/rc.txt; pk
timeout 70 python3 -m benchmarks.gpu_vs_torch --model convnext_tiny --batch 1 --batch 16 --dtype float16 --compile reduce-overhead --seconds 0.6 --out $R/vs16 > $R/vs16.log 2>&1; echo "vs16 rc=$?" >> $R/rc.txt; pk
timeout 300 python3 -m benchmarks.gpu_vs_torch --model convnext_tiny --model efficientnet_b0 --model mobilenet_v2 --model resnet50 --model bert --model gpt2 --batch 1 --batch 16 --dtype float32 --compile reduce-overhead --seconds 0.6 --out $R/vs > $R/vs.log 2>&1; echo "vs rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; cat $R/pointwise.log | cut -c1-300; head -14 $R/items-cnx-fp16-b16.log | cut -c1-200; grep -h " float" $R/vs16.log $R/vs.log | cut -c1-110

#!/bin/bash
# CNNs on cuda:0 now: PyTorch's kernels (eager NCHW, channels-last, torch.compile), devicelayer's items, ratios
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res69; mkdir -p $R; cp .gpu/run69.sh .gpu/probe_torch.py $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res69.tgz -C /tmp res69; }
nvidia-smi > $R/smi.txt 2>&1
timeout 150 python3 .gpu/probe_torch.py resnet50 float16 16 > $R/torch-r50-fp16-b16.log 2>&1; echo "torch r50 rc=$?" >> $R/rc.txt; pk
timeout 110 python3 -m benchmarks.cuda_item_times --arch resnet50 --dtype float16 --batch 16 --top 60 > $R/items-r50-fp16-b16.log 2>&1; echo "items r50 rc=$?" >> $R/rc.txt; pk
timeout 200 python3 -m benchmarks.gpu_vs_torch --model resnet50 --model efficientnet_b0 --batch 1 --batch 16 --dtype float16 --dtype float32 --compile reduce-overhead --seconds 1.0 --out $R/vs > $R/vs.log 2>&1; echo "vs rc=$?" >> $R/rc.txt; pk
timeout 90 python3 -m benchmarks.cuda_item_times --arch efficientnet_b0 --dtype float16 --batch 16 --top 40 > $R/items-eff-fp16-b16.log 2>&1; echo "items eff rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; grep -E "^==|compile" $R/torch*.log; head -20 $R/items-r50*.log; grep " float" $R/vs.log | cut -c1-140

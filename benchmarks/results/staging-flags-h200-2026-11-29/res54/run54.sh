#!/bin/bash
# transformers on CUDA: cold start of a second process (BERT, GPT-2), devicelayer against eager and
# torch.compile(reduce-overhead) in float32 and float16, GPT-2's recorded items
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res54; mkdir -p $R /tmp/models; cp .gpu/run54.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
pk() { tar -czf $OUT/res54.tgz -C /tmp res54; }
timeout 200 python3 -m benchmarks.cold_start --models-dir /tmp/models --model bert --model gpt2 --device cuda:0 --repeat 5 --profile --out $R/cold > $R/cold.log 2>&1; echo "cold rc=$?" >> $R/rc.txt; pk
timeout 280 python3 -m benchmarks.gpu_vs_torch --model gpt2 --model bert --batch 1 --batch 16 --dtype float32 --dtype float16 --compile reduce-overhead --seconds 1.5 --out $R/vs > $R/vs.log 2>&1; echo "vs rc=$?" >> $R/rc.txt; pk
timeout 70 python3 -m benchmarks.cuda_item_times --arch gpt2 --batch 1 --top 40 --out $R/items > $R/items.log 2>&1; echo "items rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; tail -30 $R/vs.log

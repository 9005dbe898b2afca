#!/bin/bash
# verify the vector_kernels refactor on CUDA; GPT-2 / BERT item times and vs torch.compile (float16, float32)
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res82; mkdir -p $R; cp .gpu/run82.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res82.tgz -C /tmp res82; }
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_depthwise.py tests/test_cuda_layernorm.py tests/test_fused_wide.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
timeout 60 python3 -m benchmarks.cuda_item_times --arch gpt2 --dtype float16 --batch 16 --top 25 > $R/items-gpt2-fp16-b16.log 2>&1; echo "items gpt2 16 rc=$?" >> $R/rc.txt; pk
timeout 60 python3 -m benchmarks.cuda_item_times --arch bert --dtype float16 --batch 1 --top 25 > $R/items-bert-fp16-b1.log 2>&1; echo "items bert 1 rc=$?" >> $R/rc.txt; pk
timeout 60 python3 -m benchmarks.cuda_item_times --arch gpt2 --dtype float32 --batch 16 --top 25 > $R/items-gpt2-fp32-b16.log 2>&1; echo "items gpt2 32 rc=$?" >> $R/rc.txt; pk
timeout 100 python3 -m benchmarks.gpu_vs_torch --model gpt2 --model bert --batch 1 --batch 16 --dtype float16 --compile reduce-overhead --seconds 0.5 --out $R/vs16 > $R/vs16.log 2>&1; echo "vs16 rc=$?" >> $R/rc.txt; pk
timeout 100 python3 -m benchmarks.gpu_vs_torch --model gpt2 --model bert --batch 1 --batch 16 --dtype float32 --compile reduce-overhead --seconds 0.5 --out $R/vs32 > $R/vs32.log 2>&1; echo "vs32 rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; grep -E "passed|failed" $R/tests.log | tail -1; grep -hE "^FAILED|^E " $R/tests.log | head -8; for f in $R/items-*.log; do echo "== $f"; head -34 $f | cut -c1-180; done; grep -h " float" $R/vs16.log $R/vs32.log | cut -c1-110

#!/bin/bash
# float16 attention on tensor cores: tests, GPT-2 / BERT item times and vs torch.compile
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res85; mkdir -p $R; cp .gpu/run85.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res85.tgz -C /tmp res85; }
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_attention.py tests/test_attention_pattern.py tests/test_epilogue.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_attention_forms.py -k "f16 or float16 or sequence_major" > $R/tests-forms.log 2>&1; echo "tests forms rc=$?" >> $R/rc.txt; pk
timeout 40 python3 -m benchmarks.cuda_item_times --arch gpt2 --dtype float16 --batch 16 --top 8 > $R/items-gpt2-fp16-b16.log 2>&1; echo "items gpt2 rc=$?" >> $R/rc.txt; pk
timeout 40 python3 -m benchmarks.cuda_item_times --arch bert --dtype float16 --batch 1 --top 8 > $R/items-bert-fp16-b1.log 2>&1; echo "items bert rc=$?" >> $R/rc.txt; pk
timeout 100 python3 -m benchmarks.gpu_vs_torch --model gpt2 --model bert --batch 1 --batch 16 --dtype float16 --compile reduce-overhead --seconds 0.5 --out $R/vs16 > $R/vs16.log 2>&1; echo "vs16 rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; for f in $R/tests*.log; do grep -E "passed|failed" $f | tail -1; grep -hE "^FAILED|^E " $f | head -10; done; for f in $R/items-*.log; do head -14 $f | cut -c1-150; done; grep -h " float" $R/vs16.log | cut -c1-200

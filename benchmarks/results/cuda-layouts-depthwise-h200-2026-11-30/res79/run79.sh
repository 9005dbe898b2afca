#!/bin/bash
# GELU fused with the chain around it; ConvNeXt and GPT-2 float16 item times; vs torch.compile
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res79; mkdir -p $R; cp .gpu/run79.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res79.tgz -C /tmp res79; }
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 80 python3 -m pytest -q -p no:cacheprovider tests/test_gelu_fusion.py tests/test_epilogue.py tests/test_fusion.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
timeout 60 python3 -m benchmarks.cuda_item_times --arch convnext_tiny --dtype float16 --batch 16 --top 6 > $R/items-cnx-fp16-b16.log 2>&1; echo "items cnx rc=$?" >> $R/rc.txt; pk
timeout 60 python3 -m benchmarks.cuda_item_times --arch gpt2 --dtype float16 --batch 16 --top 16 > $R/items-gpt2-fp16-b16.log 2>&1; echo "items gpt2 rc=$?" >> $R/rc.txt; pk
timeout 150 python3 -m benchmarks.gpu_vs_torch --model convnext_tiny --model gpt2 --batch 1 --batch 16 --dtype float16 --compile reduce-overhead --seconds 0.6 --out $R/vs > $R/vs.log 2>&1; echo "vs rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; grep -E "passed|failed" $R/tests.log | tail -1; grep -hE "^FAILED|^E " $R/tests.log | head -8; head -12 $R/items-cnx-fp16-b16.log | cut -c1-160; head -30 $R/items-gpt2-fp16-b16.log | cut -c1-200; grep -h " float" $R/vs.log | cut -c1-110

#!/bin/bash
# bias stays with the product, GELU chains fused on kernel devices: tests, ConvNeXt items, vs torch.compile float16
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res80; mkdir -p $R; cp .gpu/run80.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res80.tgz -C /tmp res80; }
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_gelu_fusion.py tests/test_epilogue.py tests/test_fusion.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
timeout 50 python3 -m benchmarks.cuda_item_times --arch convnext_tiny --dtype float16 --batch 16 --top 4 > $R/items-cnx-fp16-b16.log 2>&1; echo "items cnx rc=$?" >> $R/rc.txt; pk
timeout 200 python3 -m benchmarks.gpu_vs_torch --model convnext_tiny --model gpt2 --model bert --model efficientnet_b0 --batch 1 --batch 16 --dtype float16 --compile reduce-overhead --seconds 0.5 --out $R/vs > $R/vs.log 2>&1; echo "vs rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; grep -E "passed|failed" $R/tests.log | tail -1; grep -hE "^FAILED|^E " $R/tests.log | head -8; head -14 $R/items-cnx-fp16-b16.log | cut -c1-160; grep -h " float" $R/vs.log | cut -c1-110

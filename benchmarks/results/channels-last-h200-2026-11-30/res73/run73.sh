#!/bin/bash
# cuDNN's top algorithms timed with their epilogue; where ConvNeXt-T and EfficientNet-B0 spend their time in float16
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res73; mkdir -p $R; cp .gpu/run73.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res73.tgz -C /tmp res73; }
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_pool.py tests/test_cuda_conv.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
timeout 80 python3 -m benchmarks.cuda_item_times --arch resnet50 --dtype float16 --batch 16 --top 6 > $R/items-r50-fp16-b16.log 2>&1; echo "items r50 rc=$?" >> $R/rc.txt; pk
timeout 80 python3 -m benchmarks.cuda_item_times --arch convnext_tiny --dtype float16 --batch 16 --top 40 > $R/items-cnx-fp16-b16.log 2>&1; echo "items cnx rc=$?" >> $R/rc.txt; pk
timeout 80 python3 .gpu/probe_torch.py convnext_tiny float16 16 > $R/torch-cnx-fp16-b16.log 2>&1; echo "torch cnx rc=$?" >> $R/rc.txt; pk
timeout 60 python3 -m benchmarks.cuda_item_times --arch efficientnet_b0 --dtype float16 --batch 16 --top 30 > $R/items-eff-fp16-b16.log 2>&1; echo "items eff rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; grep -E "passed|failed" $R/tests.log | tail -2; grep -E "^FAILED|^E " $R/tests.log | head -8; head -7 $R/items-r50-fp16-b16.log | cut -c1-300; head -14 $R/items-cnx-fp16-b16.log | cut -c1-200; grep "^==" $R/torch-cnx*.log; head -10 $R/items-eff-fp16-b16.log

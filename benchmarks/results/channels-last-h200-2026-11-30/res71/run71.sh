#!/bin/bash
# channels-last convolutions: cuDNN with channels-last filters, 1x1 layers as cuBLASLt products over rows
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res71; mkdir -p $R; cp .gpu/run71.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res71.tgz -C /tmp res71; }
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 200 python3 -m pytest -q -x -p no:cacheprovider tests/test_cuda_conv.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
timeout 90 python3 -m benchmarks.cuda_item_times --arch resnet50 --dtype float16 --batch 16 --top 70 > $R/items-r50-fp16-b16.log 2>&1; echo "items fp16 rc=$?" >> $R/rc.txt; pk
timeout 90 python3 -m benchmarks.cuda_item_times --arch resnet50 --dtype float32 --batch 16 --top 12 > $R/items-r50-fp32-b16.log 2>&1; echo "items fp32 rc=$?" >> $R/rc.txt; pk
timeout 200 python3 -m benchmarks.gpu_vs_torch --model resnet50 --model efficientnet_b0 --batch 1 --batch 16 --dtype float16 --dtype float32 --compile reduce-overhead --seconds 1.0 --out $R/vs > $R/vs.log 2>&1; echo "vs rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; tail -25 $R/tests.log | grep -E "passed|failed|Error|error|assert" | head -20; head -8 $R/items-r50-fp16-b16.log; head -8 $R/items-r50-fp32-b16.log; grep " float" $R/vs.log | cut -c1-140

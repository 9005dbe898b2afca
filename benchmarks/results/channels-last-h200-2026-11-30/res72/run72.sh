#!/bin/bash
# cuDNN pools (channels-last through the stem and the last block), the stem's channels-last search, CNNs vs torch.compile
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res72; mkdir -p $R; cp .gpu/run72.sh .gpu/probe_stem.py $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res72.tgz -C /tmp res72; }
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 170 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_pool.py tests/test_cuda_conv.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
timeout 60 python3 .gpu/probe_stem.py > $R/stem.log 2>&1; echo "stem rc=$?" >> $R/rc.txt; pk
timeout 80 python3 -m benchmarks.cuda_item_times --arch resnet50 --dtype float16 --batch 16 --top 8 > $R/items-r50-fp16-b16.log 2>&1; echo "items rc=$?" >> $R/rc.txt; pk
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_ops.py -k "pool" > $R/tests-ops-pool.log 2>&1; echo "ops pool rc=$?" >> $R/rc.txt; pk
timeout 200 python3 -m benchmarks.gpu_vs_torch --model resnet50 --model mobilenet_v2 --model convnext_tiny --batch 1 --batch 16 --dtype float16 --compile reduce-overhead --seconds 1.0 --out $R/vs > $R/vs.log 2>&1; echo "vs rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; grep -E "passed|failed" $R/tests.log $R/tests-ops-pool.log | tail -3; grep -E "^FAILED|^E " $R/tests.log | head -12; grep -v Warn $R/stem.log | cut -c1-400; head -9 $R/items-r50-fp16-b16.log | cut -c1-300; grep " float" $R/vs.log | cut -c1-140

#!/bin/bash
# channels-last depthwise kernel, layouts through broadcast pointwise ops and transposes: tests, item times, vs torch.compile
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res76; mkdir -p $R; cp .gpu/run76.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res76.tgz -C /tmp res76; }
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 170 python3 -m pytest -q -x -p no:cacheprovider tests/test_cuda_depthwise.py tests/test_cuda_conv.py tests/test_cuda_pool.py tests/test_cuda_gemm.py tests/test_layout_negotiation.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
timeout 75 python3 -m benchmarks.cuda_item_times --arch efficientnet_b0 --dtype float16 --batch 16 --top 14 > $R/items-eff-fp16-b16.log 2>&1; echo "items eff rc=$?" >> $R/rc.txt; pk
timeout 75 python3 -m benchmarks.cuda_item_times --arch convnext_tiny --dtype float16 --batch 16 --top 14 > $R/items-cnx-fp16-b16.log 2>&1; echo "items cnx rc=$?" >> $R/rc.txt; pk
timeout 200 python3 -m benchmarks.gpu_vs_torch --model efficientnet_b0 --model convnext_tiny --model mobilenet_v2 --batch 1 --batch 16 --dtype float16 --compile reduce-overhead --seconds 1.0 --out $R/vs > $R/vs.log 2>&1; echo "vs rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; grep -E "passed|failed" $R/tests.log | tail -2; grep -E "^FAILED|^E " $R/tests.log | head -12; head -12 $R/items-eff-fp16-b16.log | cut -c1-300; head -12 $R/items-cnx-fp16-b16.log | cut -c1-300; grep " float" $R/vs.log | cut -c1-160

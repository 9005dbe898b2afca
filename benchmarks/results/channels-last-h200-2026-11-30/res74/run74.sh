#!/bin/bash
# conv tuning times cuDNN's top algorithms; depthwise convs cuDNN vs the op's kernel; CNNs float16 vs torch.compile
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res74; mkdir -p $R; cp .gpu/run74.sh .gpu/probe_dw.py $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res74.tgz -C /tmp res74; }
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_pool.py tests/test_cuda_conv.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
timeout 80 python3 -m benchmarks.cuda_item_times --arch resnet50 --dtype float16 --batch 16 --top 6 > $R/items-r50-fp16-b16.log 2>&1; echo "items r50 rc=$?" >> $R/rc.txt; pk
timeout 60 python3 .gpu/probe_dw.py > $R/dw-cudnn.log 2>&1; echo "dw rc=$?" >> $R/rc.txt
DEVICELAYER_CUDNN=0 timeout 60 python3 .gpu/probe_dw.py > $R/dw-kernels.log 2>&1; echo "dw0 rc=$?" >> $R/rc.txt; pk
timeout 230 python3 -m benchmarks.gpu_vs_torch --model resnet50 --model efficientnet_b0 --model mobilenet_v2 --model convnext_tiny --batch 1 --batch 16 --dtype float16 --compile reduce-overhead --seconds 1.0 --out $R/vs > $R/vs.log 2>&1; echo "vs rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; grep -E "passed|failed" $R/tests.log | tail -2; grep -E "^FAILED|^E " $R/tests.log | head -8; head -9 $R/items-r50-fp16-b16.log | cut -c1-300; cut -c1-90 $R/dw-*.log | grep cudnn; grep " float" $R/vs.log | cut -c1-140

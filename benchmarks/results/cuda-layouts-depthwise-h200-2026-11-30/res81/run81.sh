#!/bin/bash
# fused elementwise kernels with 16-byte runs on CUDA: tests, pointwise chains vs PyTorch, vs torch.compile float16
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res81; mkdir -p $R; cp .gpu/run81.sh .gpu/probe_pointwise.py $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res81.tgz -C /tmp res81; }
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_fused_wide.py tests/test_fusion.py tests/test_gelu_fusion.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
timeout 60 python3 .gpu/probe_pointwise.py > $R/pointwise.log 2>&1; echo "pointwise rc=$?" >> $R/rc.txt; pk
timeout 120 python3 -m benchmarks.gpu_vs_torch --model convnext_tiny --model efficientnet_b0 --model gpt2 --batch 1 --batch 16 --dtype float16 --compile reduce-overhead --seconds 0.4 --out $R/vs > $R/vs.log 2>&1; echo "vs rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; grep -E "passed|failed" $R/tests.log | tail -1; grep -hE "^FAILED|^E " $R/tests.log | head -8; cut -c1-250 $R/pointwise.log; grep -h " float" $R/vs.log | cut -c1-110

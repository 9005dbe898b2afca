#!/bin/bash
# epilogues read through reshapes, one-launch split/concat, SE gates recomputed in the product, lone wide ops: tests, transformers + SE CNNs vs torch.compile
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res83; mkdir -p $R; cp .gpu/run83.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res83.tgz -C /tmp res83; }
DEVICELAYER_TEST_DEVICES=cuda:0,opencl:0,vulkan:0 timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_pieces.py tests/test_epilogue.py tests/test_fused_wide.py > $R/tests-all.log 2>&1; echo "tests all rc=$?" >> $R/rc.txt; pk
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_fusion.py tests/test_cuda_gemm.py tests/test_gelu_fusion.py > $R/tests-cuda.log 2>&1; echo "tests cuda rc=$?" >> $R/rc.txt; pk
timeout 40 python3 -m benchmarks.cuda_item_times --arch gpt2 --dtype float16 --batch 16 --top 12 > $R/items-gpt2-fp16-b16.log 2>&1; echo "items gpt2 rc=$?" >> $R/rc.txt; pk
timeout 90 python3 -m benchmarks.gpu_vs_torch --model gpt2 --model bert --batch 1 --batch 16 --dtype float16 --compile reduce-overhead --seconds 0.5 --out $R/vs16 > $R/vs16.log 2>&1; echo "vs16 rc=$?" >> $R/rc.txt; pk
timeout 90 python3 -m benchmarks.gpu_vs_torch --model gpt2 --model bert --batch 1 --batch 16 --dtype float32 --compile reduce-overhead --seconds 0.5 --out $R/vs32 > $R/vs32.log 2>&1; echo "vs32 rc=$?" >> $R/rc.txt; pk
timeout 90 python3 -m benchmarks.gpu_vs_torch --model efficientnet_b0 --model mobilenet_v2 --batch 1 --batch 16 --dtype float16 --compile reduce-overhead --seconds 0.4 --out $R/cnn16 > $R/cnn16.log 2>&1; echo "cnn16 rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; for f in $R/tests-*.log; do grep -E "passed|failed" $f | tail -1; grep -hE "^FAILED|^E " $f | head -8; done; head -24 $R/items-gpt2-fp16-b16.log | cut -c1-150; grep -h " float" $R/vs16.log $R/vs32.log $R/cnn16.log | cut -c1-120

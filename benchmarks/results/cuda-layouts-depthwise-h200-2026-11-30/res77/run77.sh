#!/bin/bash
# CUDA warp-per-row layer normalization: tests, ConvNeXt item times, CNNs + transformers vs torch.compile
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res77; mkdir -p $R; cp .gpu/run77.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res77.tgz -C /tmp res77; }
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_layernorm.py tests/test_row_kernels.py tests/test_fusion.py tests/test_graph.py tests/test_recording.py tests/test_gelu_fusion.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_ops.py -k normalization > $R/tests-ops.log 2>&1; echo "tests ops rc=$?" >> $R/rc.txt; pk
timeout 70 python3 -m benchmarks.cuda_item_times --arch convnext_tiny --dtype float16 --batch 16 --top 12 > $R/items-cnx-fp16-b16.log 2>&1; echo "items cnx rc=$?" >> $R/rc.txt; pk
timeout 250 python3 -m benchmarks.gpu_vs_torch --model convnext_tiny --model resnet50 --model bert --model gpt2 --batch 1 --batch 16 --dtype float16 --compile reduce-overhead --seconds 1.0 --out $R/vs > $R/vs.log 2>&1; echo "vs rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; grep -E "passed|failed" $R/tests*.log | tail -3; grep -hE "^FAILED|^E " $R/tests*.log | head -12; head -22 $R/items-cnx-fp16-b16.log | cut -c1-250; grep " float" $R/vs.log | cut -c1-120

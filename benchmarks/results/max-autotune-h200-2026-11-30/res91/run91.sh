#!/bin/bash
# CUDA attention tests after the review refactor; ResNet-50 float16 batch 16 on cuda:0 against torch.compile max-autotune (and reduce-overhead) in one process
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res91; mkdir -p $R; cp .gpu/run91.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res91.tgz -C /tmp res91; }
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 150 python3 -m pytest -q tests/test_cuda_attention.py tests/test_attention_forms.py tests/test_attention_pattern.py > $R/attn.log 2>&1; echo "attn rc=$?" >> $R/rc.txt; pk
timeout 470 python3 -m benchmarks.gpu_vs_torch --model resnet50 --batch 16 --dtype float16 --compile max-autotune --compile reduce-overhead --seconds 0.5 --out $R/mat > $R/mat.log 2>&1; echo "mat rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; tail -4 $R/attn.log; grep -E "float16|ms|max-autotune" $R/mat.log | tail -20 | cut -c1-250

#!/bin/bash
# final tree: GPU tests of the products and epilogues; transformers against torch.compile, before (6d7113b) and
# after in one session; cold start of a second process
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
ROOT=$PWD; R=/tmp/res62; mkdir -p $R /tmp/before /tmp/models; cp .gpu/run62.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
tar -xzf .gpu/before-6d7.tar.gz -C /tmp/before
pk() { tar -czf $OUT/res62.tgz -C /tmp res62; }
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_gemm.py tests/test_epilogue.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
timeout 160 python3 -m benchmarks.gpu_vs_torch --model gpt2 --model bert --batch 1 --batch 16 --dtype float32 --dtype float16 --compile reduce-overhead --seconds 1.0 --out $R/vs-after > $R/vs-after.log 2>&1; echo "vs after rc=$?" >> $R/rc.txt; pk
(cd /tmp/before && PYTHONPATH=/tmp/site:/tmp/before timeout 160 python3 -m benchmarks.gpu_vs_torch --model gpt2 --model bert --batch 1 --batch 16 --dtype float32 --dtype float16 --compile reduce-overhead --seconds 1.0 --out $R/vs-before > $R/vs-before.log 2>&1; echo "vs before rc=$?" >> $R/rc.txt); pk
timeout 100 python3 -m benchmarks.arch_models --models-dir /tmp/models --model gpt2 --model bert > $R/export.log 2>&1
timeout 120 python3 -m benchmarks.cold_start --models-dir /tmp/models --model bert --model gpt2 --device cuda:0 --repeat 3 --out $R/cold > $R/cold.log 2>&1; echo "cold rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; grep -E "passed|failed" $R/tests.log | tail -2; grep -E "^FAILED" $R/tests.log | head; grep " float" $R/vs-*.log | cut -c1-200; grep -E "first result" $R/cold.log | cut -c1-150

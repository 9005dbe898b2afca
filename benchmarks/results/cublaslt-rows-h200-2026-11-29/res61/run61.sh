#!/bin/bash
# cuBLASLt takes MatMul + bias row + summand + ReLU as its epilogue: GPU tests, BERT b16 items, transformers
# against torch.compile (after)
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res61; mkdir -p $R /tmp/onnx; cp .gpu/run61.sh .gpu/probe_b16.py $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res61.tgz -C /tmp res61; }
timeout 260 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_gemm.py tests/test_epilogue.py tests/test_row_kernels.py tests/test_cuda_conv.py tests/test_fusion.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
for c in "bert float32"; do
  set -- $c
  timeout 100 python3 .gpu/probe_b16.py $1 $2 /tmp/onnx > $R/b16-$1-$2.log 2>&1; echo "$c rc=$?" >> $R/rc.txt; pk
done
timeout 170 python3 -m benchmarks.gpu_vs_torch --model gpt2 --model bert --batch 1 --batch 16 --dtype float32 --dtype float16 --compile reduce-overhead --seconds 1.0 --out $R/vs-after > $R/vs-after.log 2>&1; echo "vs after rc=$?" >> $R/rc.txt; pk
python3 - > $R/tuned.txt 2>&1 <<'PY'
import glob, json, os
for f in glob.glob(os.path.expanduser("~/.cache/devicelayer/tuned/gemm-*.json")):
    print(f); d = json.load(open(f))["entries"]
    for k, v in d.items():
        if "256" in k or "1024" in k: print(k, v)
PY
pk
cat $R/rc.txt; tail -3 $R/tests.log; grep -E "devicelayer|torch.compile kernels" $R/b16-bert-float32.log | head; grep " float" $R/vs-after.log | cut -c1-220; grep -E "passed|failed" $R/tests.log | tail -3; grep -E "FAILED|Error" $R/tests.log | head -10; grep -c . $R/tuned.txt
grep "2048, 256, 1024" $R/tuned.txt | cut -c1-600 | head -4

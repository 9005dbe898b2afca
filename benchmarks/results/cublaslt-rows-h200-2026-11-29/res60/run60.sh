#!/bin/bash
# cuBLASLt products (bias epilogue, tuned candidates) and short rows sharing a work-group: GPU tests, batch-16
# transformer items against torch.compile's kernels, transformers against torch.compile (after)
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res60; mkdir -p $R /tmp/onnx; cp .gpu/run60.sh .gpu/probe_b16.py $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res60.tgz -C /tmp res60; }
timeout 200 python3 -m pytest -q -x -p no:cacheprovider tests/test_cuda_gemm.py tests/test_row_kernels.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
for c in "gpt2 float32" "bert float32"; do
  set -- $c
  timeout 100 python3 .gpu/probe_b16.py $1 $2 /tmp/onnx > $R/b16-$1-$2.log 2>&1; echo "$c rc=$?" >> $R/rc.txt; pk
done
timeout 170 python3 -m benchmarks.gpu_vs_torch --model gpt2 --model bert --batch 1 --batch 16 --dtype float32 --dtype float16 --compile reduce-overhead --seconds 1.0 --out $R/vs-after > $R/vs-after.log 2>&1; echo "vs after rc=$?" >> $R/rc.txt; pk
python3 - > $R/tuned.txt 2>&1 <<'PY'
import glob, json, os
for f in glob.glob(os.path.expanduser("~/.cache/devicelayer/tuned/gemm-*.json")):
    print(f); print(json.dumps(json.load(open(f)), indent=0)[:6000])
PY
cat $R/rc.txt; tail -3 $R/tests.log; grep -v Warn $R/b16-gpt2-float32.log | grep -E "torch.compile|devicelayer|gemm|softmax|layer_norm|matmul" | head -20; grep -E "devicelayer|torch.compile kernels" $R/b16-bert-float32.log | head; grep " float" $R/vs-after.log | cut -c1-220; head -30 $R/tuned.txt

#!/bin/bash
# bfloat16 again: pools left to the op kernels, patterns (attention, softmax, LayerNorm, GELU) in bfloat16; cold-start probe
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res102; mkdir -p $R; cp .gpu/run102.sh .gpu/coldprobe.py $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res102.tgz -C /tmp res102; }
python3 -c "import cupy, ml_dtypes; a = cupy.arange(4, dtype=ml_dtypes.bfloat16); print(cupy.__version__, a * 2, (a + 1).dtype)" > $R/cupy.txt 2>&1
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 240 python3 -m pytest -q tests/test_cuda_attention.py tests/test_cuda_layernorm.py tests/test_cuda_depthwise.py tests/test_cuda_conv.py tests/test_cuda_gemm.py tests/test_cuda_pool.py tests/test_gelu_fusion.py tests/test_attention_pattern.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 100 python3 -m pytest -q tests/test_ops.py -k "bf16 or bfloat16" > $R/ops.log 2>&1; echo "ops rc=$?" >> $R/rc.txt; pk
timeout 300 python3 -m benchmarks.gpu_vs_torch --model resnet50 --model gpt2 --model bert --batch 1 --batch 16 --dtype bfloat16 --compile reduce-overhead --seconds 0.5 --out $R/bf16 > $R/bf16.log 2>&1; echo "bf16 rc=$?" >> $R/rc.txt; pk
mkdir -p /tmp/models
python3 -c "
from pathlib import Path
from benchmarks import arch_models
from benchmarks.gpu_vs_torch import _arch
import numpy as np, onnx
from benchmarks.host_vs_onnxruntime import random_feeds
for m in ('resnet50',):
    arch_models.export(_arch(m), Path(f'/tmp/models/{m}.onnx'))
    np.savez(f'/tmp/{m}.npz', **random_feeds(onnx.load(f'/tmp/models/{m}.onnx', load_external_data=False), seed=1))
" > $R/export.log 2>&1
export DEVICELAYER_CACHE=/tmp/probecache CUPY_CACHE_DIR=/tmp/probecupy
for k in 0 1 2 3; do timeout 60 python3 .gpu/coldprobe.py /tmp/models/resnet50.onnx /tmp/resnet50.npz > $R/probe-resnet50-$k.txt 2>&1; done; echo "probe rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt $R/cupy.txt; tail -3 $R/tests.log; grep -E "^FAILED|Error" $R/tests.log | head -20; tail -2 $R/ops.log; grep -E "bfloat16 b" $R/bf16.log | cut -c1-400; head -2 $R/probe-resnet50-2.txt

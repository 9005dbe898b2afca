#!/bin/bash
# CUDA tests after the vector_kernels review; cold start profiled: each cuDNN/cuBLAS/NVRTC call of warm processes timed
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res99; mkdir -p $R; cp .gpu/run99.sh .gpu/coldprobe.py $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res99.tgz -C /tmp res99; }
mkdir -p /tmp/models
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 200 python3 -m pytest -q -x tests/test_cuda_attention.py tests/test_cuda_layernorm.py tests/test_cuda_depthwise.py tests/test_cuda_conv.py tests/test_cuda_gemm.py tests/test_cuda_pool.py tests/test_cuda_start.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
timeout 120 python3 -m benchmarks.cold_start --models-dir /tmp/models --model resnet50 --model efficientnet_b0 --repeat 2 --profile --out $R/cold > $R/cold.log 2>&1; echo "cold rc=$?" >> $R/rc.txt; pk
python3 -c "
import numpy as np, onnx
from benchmarks.host_vs_onnxruntime import random_feeds
for m in ('resnet50','efficientnet_b0'):
    np.savez(f'/tmp/{m}.npz', **random_feeds(onnx.load(f'/tmp/models/{m}.onnx', load_external_data=False), seed=1))
"
export DEVICELAYER_CACHE=/tmp/probecache CUPY_CACHE_DIR=/tmp/probecupy
for m in resnet50 efficientnet_b0; do for k in 0 1 2 3; do timeout 60 python3 .gpu/coldprobe.py /tmp/models/$m.onnx /tmp/$m.npz > $R/probe-$m-$k.txt 2>&1; done; done; echo "probe rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; tail -3 $R/tests.log; grep -E "first result" $R/cold.log | cut -c1-170; head -1 $R/probe-*-[123].txt

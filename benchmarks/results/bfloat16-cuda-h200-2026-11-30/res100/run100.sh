#!/bin/bash
# cold start: each cuDNN/cuBLAS/NVRTC call of warm processes timed (hooks on the right modules); bfloat16 models against torch.compile (baseline)
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res100; mkdir -p $R; cp .gpu/run100.sh .gpu/coldprobe.py $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res100.tgz -C /tmp res100; }
mkdir -p /tmp/models
python3 -c "
from benchmarks import arch_models
from benchmarks.gpu_vs_torch import _arch
import numpy as np, onnx
from benchmarks.host_vs_onnxruntime import random_feeds
for m in ('resnet50','efficientnet_b0'):
    arch_models.export(_arch(m), f'/tmp/models/{m}.onnx')
    np.savez(f'/tmp/{m}.npz', **random_feeds(onnx.load(f'/tmp/models/{m}.onnx', load_external_data=False), seed=1))
" > $R/export.log 2>&1
export DEVICELAYER_CACHE=/tmp/probecache CUPY_CACHE_DIR=/tmp/probecupy
for m in resnet50 efficientnet_b0; do for k in 0 1 2 3; do timeout 60 python3 .gpu/coldprobe.py /tmp/models/$m.onnx /tmp/$m.npz > $R/probe-$m-$k.txt 2>&1; done; done; echo "probe rc=$?" >> $R/rc.txt; pk
unset DEVICELAYER_CACHE CUPY_CACHE_DIR
timeout 330 python3 -m benchmarks.gpu_vs_torch --model gpt2 --model bert --model resnet50 --batch 1 --batch 16 --dtype bfloat16 --compile reduce-overhead --seconds 0.5 --out $R/bf16 > $R/bf16.log 2>&1; echo "bf16 rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; head -3 $R/probe-resnet50-2.txt; grep -E "bfloat16 b" $R/bf16.log | cut -c1-300; tail -5 $R/bf16.log

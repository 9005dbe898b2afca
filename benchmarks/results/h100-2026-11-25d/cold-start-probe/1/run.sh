#!/bin/bash
# cold-start diagnosis: init overlap, first cuBLAS calls plain/captured/eager loading, instrumented warm starts
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res; mkdir -p $R /tmp/models
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1; lscpu | grep "Model name" >> $R/gpu.txt
python3 -c "import cupy; print(cupy.__version__)" >> $R/gpu.txt 2>&1
for k in 1 2 3; do
  for v in plain early; do python3 .gpu/csprobe.py init $v >> $R/init.log 2>&1; done
done
python3 .gpu/csprobe.py gemm plain > $R/gemm-plain.log 2>&1
python3 .gpu/csprobe.py gemm capture > $R/gemm-capture.log 2>&1
CUDA_MODULE_LOADING=EAGER python3 .gpu/csprobe.py gemm plain > $R/gemm-plain-eager.log 2>&1
python3 .gpu/csprobe.py gemm plain > $R/gemm-plain2.log 2>&1
timeout 200 python3 -c "
from benchmarks import arch_models
from benchmarks.gpu_vs_torch import _arch
from pathlib import Path
import numpy as np, onnx
from benchmarks.host_vs_onnxruntime import random_feeds
p = Path('/tmp/models/resnet50.onnx'); arch_models.export(_arch('resnet50'), p)
np.savez('/tmp/feeds.npz', **random_feeds(onnx.load(str(p), load_external_data=False), seed=1))
" > $R/export.log 2>&1
export DEVICELAYER_CACHE=/tmp/dlc CUPY_CACHE_DIR=/tmp/cupyc
python3 .gpu/csprobe.py run plain /tmp/models/resnet50.onnx /tmp/feeds.npz > $R/run-cold.log 2>&1
for k in 1 2 3; do
  for v in plain early; do python3 .gpu/csprobe.py run $v /tmp/models/resnet50.onnx /tmp/feeds.npz >> $R/run.log 2>&1; done
done
python3 -X importtime .gpu/csprobe.py run plain /tmp/models/resnet50.onnx /tmp/feeds.npz > $R/importtime.log 2>&1
tar -czf $OUT/res.tgz -C /tmp res

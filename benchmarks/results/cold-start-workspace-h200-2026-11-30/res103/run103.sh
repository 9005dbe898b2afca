#!/bin/bash
# cold start: a stored cuDNN algorithm taken with its stored scratch size (no cuDNN query at compile), before/after in one session; conv tests
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res103; mkdir -p $R; cp .gpu/run103.sh .gpu/coldprobe.py $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res103.tgz -C /tmp res103; }
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 150 python3 -m pytest -q tests/test_cuda_conv.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
mkdir -p /tmp/models /tmp/after
cp backends/cuda/dnn.py backends/cuda/conv.py /tmp/after/
timeout 130 python3 -m benchmarks.cold_start --models-dir /tmp/models --model resnet50 --model efficientnet_b0 --repeat 4 --out $R/cold-after > $R/cold-after.log 2>&1; echo "cold after rc=$?" >> $R/rc.txt; pk
cp .gpu/wsbefore/dnn.py .gpu/wsbefore/conv.py backends/cuda/
timeout 130 python3 -m benchmarks.cold_start --models-dir /tmp/models --model resnet50 --model efficientnet_b0 --repeat 4 --out $R/cold-before > $R/cold-before.log 2>&1; echo "cold before rc=$?" >> $R/rc.txt; pk
cp /tmp/after/dnn.py /tmp/after/conv.py backends/cuda/
python3 -c "
import numpy as np, onnx
from benchmarks.host_vs_onnxruntime import random_feeds
np.savez('/tmp/resnet50.npz', **random_feeds(onnx.load('/tmp/models/resnet50.onnx', load_external_data=False), seed=1))
" > $R/feeds.log 2>&1
export DEVICELAYER_CACHE=/tmp/probecache CUPY_CACHE_DIR=/tmp/probecupy
for k in 0 1 2 3; do timeout 60 python3 .gpu/coldprobe.py /tmp/models/resnet50.onnx /tmp/resnet50.npz > $R/probe-resnet50-$k.txt 2>&1; done; echo "probe rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; tail -2 $R/tests.log; for v in after before; do echo "== $v"; grep -E "first result" $R/cold-$v.log | cut -c1-170; done; for k in 1 2 3; do head -1 $R/probe-resnet50-$k.txt; done

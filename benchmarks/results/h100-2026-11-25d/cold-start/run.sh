#!/bin/bash
# final tree on an H100 machine: cold start before (df3b175) / after alternating twice; the fixed ScatterND case
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res; mkdir -p $R/after $R/before /tmp/models /tmp/before
tar -xzf .gpu/before.tar.gz -C /tmp/before
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1; lscpu | grep -E "Model name|^CPU\(s\)" >> $R/gpu.txt
M="--models-dir /tmp/models --model resnet50 --model efficientnet_b0 --device cuda:0 --repeat 3"
for k in 1 2; do
( cd /tmp/before && PYTHONPATH=/tmp/site:/tmp/before timeout 150 python3 -m benchmarks.cold_start $M --out $R/before/$k > $R/before/run$k.log 2>&1; echo "before $k rc=$?" >> $R/rc.txt )
timeout 150 python3 -m benchmarks.cold_start $M --out $R/after/$k > $R/after/run$k.log 2>&1; echo "after $k rc=$?" >> $R/rc.txt
done
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_onnx_indexing.py -k "ScatterND or OneHot" > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
python3 -c "import onnxruntime; print('onnxruntime', onnxruntime.__version__)" >> $R/gpu.txt
tar -czf $OUT/res.tgz -C /tmp res

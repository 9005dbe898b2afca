#!/bin/bash
# cold start before (df3b175) / after, alternating three times, a profile of the after tree, then GPU tests
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res; mkdir -p $R/after $R/before $R/prof /tmp/models /tmp/before
tar -xzf .gpu/before.tar.gz -C /tmp/before
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1; lscpu | grep "Model name" >> $R/gpu.txt
cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag >> $R/gpu.txt 2>&1
M="--models-dir /tmp/models --model resnet50 --model efficientnet_b0 --device cuda:0 --repeat 3"
for k in 1 2 3; do
( cd /tmp/before && PYTHONPATH=/tmp/site:/tmp/before timeout 150 python3 -m benchmarks.cold_start $M --out $R/before/$k > $R/before/run$k.log 2>&1; echo "before $k rc=$?" >> $R/rc.txt )
timeout 150 python3 -m benchmarks.cold_start $M --out $R/after/$k > $R/after/run$k.log 2>&1; echo "after $k rc=$?" >> $R/rc.txt
done
timeout 100 python3 -m benchmarks.cold_start --models-dir /tmp/models --model resnet50 --device cuda:0 --repeat 2 --profile --out $R/prof > $R/prof/run.log 2>&1; echo "prof rc=$?" >> $R/rc.txt
timeout 280 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_start.py tests/test_load_once.py tests/test_onnx_rawdata.py tests/test_entry_points.py tests/test_registry.py tests/test_lane.py tests/test_cuda_conv.py tests/test_epilogue.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
tar -czf $OUT/res.tgz -C /tmp res

#!/bin/bash
# cold start before (df3b175) / after, alternating, then a profile of the after tree, then tests
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res; mkdir -p $R/after $R/before $R/prof /tmp/models /tmp/before
tar -xzf .gpu/before.tar.gz -C /tmp/before
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1; lscpu | grep "Model name" >> $R/gpu.txt
M="--models-dir /tmp/models --model resnet50 --model efficientnet_b0 --device cuda:0 --repeat 3"
for k in 1 2; do
( cd /tmp/before && PYTHONPATH=/tmp/site:/tmp/before timeout 150 python3 -m benchmarks.cold_start $M --out $R/before/$k > $R/before/run$k.log 2>&1; echo "before $k rc=$?" >> $R/rc.txt )
timeout 150 python3 -m benchmarks.cold_start $M --out $R/after/$k > $R/after/run$k.log 2>&1; echo "after $k rc=$?" >> $R/rc.txt
done
timeout 100 python3 -m benchmarks.cold_start --models-dir /tmp/models --model resnet50 --device cuda:0 --repeat 2 --profile --out $R/prof > $R/prof/run.log 2>&1; echo "prof rc=$?" >> $R/rc.txt
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_start.py tests/test_load_once.py tests/test_entry_points.py tests/test_registry.py tests/test_lane.py tests/test_cuda_conv.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
tar -czf $OUT/res.tgz -C /tmp res

#!/bin/bash
# final tree: the tests of this change on every device, then cold start on CUDA, landed tree (before) and final (after)
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res; mkdir -p $R/before $R/after /tmp/before /tmp/models
tar -xzf .gpu/before.tar.gz -C /tmp/before
nvidia-smi -L > $R/machine.txt 2>&1; lscpu | grep "Model name" >> $R/machine.txt; git log -1 --format=%H >> $R/machine.txt 2>&1
timeout 280 python3 -m pytest -q -p no:cacheprovider tests/test_load_once.py tests/test_epilogue.py tests/test_tile_tuning.py tests/test_ops.py -k "conv or load or epilogue or tile or tuned" > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
M="--models-dir /tmp/models --model resnet50 --model efficientnet_b0 --device cuda:0 --repeat 3"
( cd /tmp/before && PYTHONPATH=/tmp/site:/tmp/before timeout 120 python3 -m benchmarks.cold_start $M --out $R/before > $R/before/run.log 2>&1; echo "before rc=$?" >> $R/rc.txt )
timeout 120 python3 -m benchmarks.cold_start $M --out $R/after > $R/after/run.log 2>&1; echo "after rc=$?" >> $R/rc.txt
tar -czf $OUT/res.tgz -C /tmp res

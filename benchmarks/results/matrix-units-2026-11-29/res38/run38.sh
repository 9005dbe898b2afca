#!/bin/bash
# the MMA form with slices read as 16-byte words (VLOAD), K slices by tile edge (float16 on NVIDIA's cooperative matrices through Vulkan): probe, tests, ResNet-50 b16 float16
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res38; mkdir -p $R; cp .gpu/run38.sh .gpu/probe_mma.py $R/
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
DEVICELAYER_CACHE=/tmp/dlc-p timeout 170 python3 .gpu/probe_mma.py --n 1024 --n 2048 --n 4096 --convs --variant default --variant no-vload --variant mma-k16 --variant no-mma > $R/probe.log 2>&1; echo "probe rc=$?" >> $R/rc.txt
cat $R/probe.log | cut -c1-400
DEVICELAYER_TEST_DEVICES=cuda:0,opencl:0,vulkan:0 DEVICELAYER_CACHE=/tmp/dlc-t timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_matrix_units.py tests/test_tiled_pipelines.py tests/test_vulkan.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
grep -E "passed|failed|FAILED|Error" $R/tests.log | head -30
G="--device vulkan:0 --model resnet50 --batch 16 --dtype float16 --compile none --seconds 2"
DEVICELAYER_CACHE=/tmp/dlc-m timeout 110 python3 -m benchmarks.gpu_vs_torch $G --out $R/mma > $R/model-mma.log 2>&1; echo "model mma rc=$?" >> $R/rc.txt
DEVICELAYER_CACHE=/tmp/dlc-n timeout 110 python3 -c "
import sys, runpy
import devicelayer.kernels.ops.matmul as m
m.takes_mma = lambda info, elem: False
sys.argv = ['gpu_vs_torch'] + sys.argv[1:]
runpy.run_module('benchmarks.gpu_vs_torch', run_name='__main__')" $G --out $R/nomma > $R/model-nomma.log 2>&1; echo "model nomma rc=$?" >> $R/rc.txt
tail -15 $R/model-mma.log; tail -8 $R/model-nomma.log; cat $R/rc.txt
cd $OUT && tar -czf res38.tgz res38 && rm -rf res38

#!/bin/bash
# the final tree: float16 op tests on the GPU devices (vulkan:0 takes the MMA form), three models at batch 16 in
# float16 on vulkan:0 with the MMA form and without it
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res39; mkdir -p $R; cp .gpu/run39.sh $R/
DEVICELAYER_TEST_DEVICES=cuda:0,opencl:0,vulkan:0 DEVICELAYER_CACHE=/tmp/dlc-t timeout 170 python3 -m pytest -q -p no:cacheprovider tests/test_ops.py -k "matmul or gemm or conv" tests/test_fusion.py tests/test_epilogue.py tests/test_precision.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
grep -E "passed|failed|FAILED|Error" $R/tests.log | head -20
G="--device vulkan:0 --model resnet50 --model efficientnet_b0 --model bert --batch 16 --dtype float16 --compile none --seconds 2"
DEVICELAYER_CACHE=/tmp/dlc-m timeout 170 python3 -m benchmarks.gpu_vs_torch $G --out $R/mma > $R/model-mma.log 2>&1; echo "model mma rc=$?" >> $R/rc.txt
DEVICELAYER_CACHE=/tmp/dlc-n timeout 170 python3 -c "
import sys, runpy
import devicelayer.kernels.ops.matmul as m
m.takes_mma = lambda info, elem: False
sys.argv = ['gpu_vs_torch'] + sys.argv[1:]
runpy.run_module('benchmarks.gpu_vs_torch', run_name='__main__')" $G --out $R/nomma > $R/model-nomma.log 2>&1; echo "model nomma rc=$?" >> $R/rc.txt
grep -E "float16:" $R/model-mma.log $R/model-nomma.log; cat $R/rc.txt
cd $OUT && tar -czf res39.tgz res39 && rm -rf res39

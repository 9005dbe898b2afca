#!/bin/bash
# the final tree: the pipeline tests and the op cases of products and convolutions on the GPU devices
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res29; mkdir -p $R; cp .gpu/run29.sh $R/run.sh
DEVICELAYER_TEST_DEVICES=cuda:0,opencl:0,vulkan:0 DEVICELAYER_CACHE=/tmp/dlc-t timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_tiled_pipelines.py tests/test_ops.py -k "pipelines or static or choice or forcing or conv or Conv or matmul or MatMul or gemm or Gemm" > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
tail -3 $R/tests.log; cat $R/rc.txt
cd $OUT && tar -czf res29.tgz res29 && rm -rf res29

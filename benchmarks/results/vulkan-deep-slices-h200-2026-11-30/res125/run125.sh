#!/bin/bash
# the final tree's products and convolutions on vulkan:0 (float16 cases on the matrix units, 64-deep slices where deep): op cases, fusion and epilogue tests
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res125; mkdir -p $R; cp .gpu/run125.sh $R/; git status --short > $R/tree.txt; git diff > $R/tree.diff
pk() { tar -czf $OUT/res125.tgz -C /tmp res125; }
DEVICELAYER_TEST_DEVICES=vulkan:0 DEVICELAYER_CACHE=/tmp/dlc-t timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_ops.py -k "matmul or gemm or conv" > $R/ops.log 2>&1; echo "ops rc=$?" >> $R/rc.txt; pk
DEVICELAYER_TEST_DEVICES=vulkan:0 DEVICELAYER_CACHE=/tmp/dlc-t timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_fusion.py tests/test_epilogue.py tests/test_precision.py > $R/rest.log 2>&1; echo "rest rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; tail -2 $R/ops.log; tail -2 $R/rest.log; grep -h "^FAILED" $R/ops.log $R/rest.log | head -20

#!/bin/bash
# experiment: the MMA GEMM's fragments stored straight to y (no scratch, no acc[]) and other band swizzles, vulkan:0 float16; the matrix-unit tests (64 x 128 convolution tiles added) on vulkan:0
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res123; mkdir -p $R; cp .gpu/run123.sh .gpu/probe_direct.py .gpu/exp/tile_gather_direct.dlk $R/; git status --short > $R/tree.txt
pk() { tar -czf $OUT/res123.tgz -C /tmp res123; }
DEVICELAYER_CACHE=/tmp/dlc-a timeout 120 python3 .gpu/probe_direct.py --n 4096 --n 2048 > $R/probe.log 2>&1; echo "probe rc=$?" >> $R/rc.txt; pk
DEVICELAYER_TEST_DEVICES=vulkan:0 DEVICELAYER_CACHE=/tmp/dlc-t timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_matrix_units.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; cut -c1-120 $R/probe.log; tail -2 $R/tests.log; grep "^FAILED" $R/tests.log | head

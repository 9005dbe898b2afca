#!/bin/bash
# the MMA form's slices staged as 16-byte words (STAGE_WORDS) and 64-deep slices: GEMM variants on vulkan:0 against cuBLAS; matrix-unit and tiled-pipeline tests
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res118; mkdir -p $R; cp .gpu/run118.sh .gpu/probe_words.py $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res118.tgz -C /tmp res118; }
DEVICELAYER_CACHE=/tmp/dlc-a timeout 150 python3 .gpu/probe_words.py --n 1024 --n 2048 --n 4096 --shape 2048,768,768 --shape 2048,3072,768 --shape 2048,768,3072 --shape 8192,8192,2048 > $R/probe.log 2>&1; echo "probe rc=$?" >> $R/rc.txt; pk
DEVICELAYER_TEST_DEVICES=vulkan:0 DEVICELAYER_CACHE=/tmp/dlc-t timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_matrix_units.py tests/test_tiled_pipelines.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; grep -E "GEMM|  " $R/probe.log | cut -c1-150; tail -3 $R/tests.log; grep -E "^FAILED" $R/tests.log | head -20

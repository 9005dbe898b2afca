#!/bin/bash
# bfloat16 op cases on cuda:0 after the recurrent ops and det take bfloat16
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res106; mkdir -p $R; cp .gpu/run106.sh $R/; git status --short > $R/tree.txt
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 100 python3 -m pytest -q tests/test_ops.py -k "bf16" > $R/ops.log 2>&1; echo "ops rc=$?" >> $R/rc.txt
tar -czf $OUT/res106.tgz -C /tmp res106
cat $R/rc.txt; tail -3 $R/ops.log

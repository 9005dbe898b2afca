#!/bin/bash
# bfloat16 in grid_sample, roi_align, deform_conv, bernoulli, multinomial and fill, and every bfloat16 op case against the float64 oracle, on cuda:0
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res124; mkdir -p $R; cp .gpu/run124.sh $R/; git status --short > $R/tree.txt; git diff > $R/tree.diff
pk() { tar -czf $OUT/res124.tgz -C /tmp res124; }
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_ops.py -k "bf16 or grid_sample or bernoulli or multinomial or fill or roi_align or deform" > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; tail -3 $R/tests.log; grep "^FAILED" $R/tests.log | head -20

#!/bin/bash
# the precision tests on cuda:0 (the TF32 test's convolution bound relaxed: cuDNN's fastest algorithm under TF32 may be a float32 one)
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res126; mkdir -p $R; cp .gpu/run126.sh $R/; git status --short > $R/tree.txt; git diff > $R/tree.diff
pk() { tar -czf $OUT/res126.tgz -C /tmp res126; }
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_precision.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; tail -2 $R/tests.log; grep "^FAILED\|^E  " $R/tests.log | head -10

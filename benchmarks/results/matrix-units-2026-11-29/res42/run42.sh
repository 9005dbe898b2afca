#!/bin/bash
# the MMA form where the product is large enough (mma_fits), at 64 x 64 tiles or more where it is: the matrix-unit tests, then ResNet-50 and
# EfficientNet-B0 (float16, batch 16, vulkan:0 alone in its process), once
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res42; mkdir -p $R; cp .gpu/run42.sh .gpu/model_mma.py $R/
DEVICELAYER_TEST_DEVICES=cuda:0,vulkan:0 DEVICELAYER_CACHE=/tmp/dlc-t timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_matrix_units.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
tail -1 $R/tests.log
for i in 1; do
  DEVICELAYER_CACHE=/tmp/dlc-m$i timeout 80 python3 .gpu/model_mma.py --seconds 3 > $R/mma-$i.log 2>&1; echo "mma $i rc=$?" >> $R/rc.txt
done
grep -h '"model"' $R/*.log; cat $R/rc.txt
cd $OUT && tar -czf res42.tgz res42 && rm -rf res42

#!/bin/bash
# float16 ResNet-50 b16 on vulkan:0 again: the stop-38 script (model_mma.py) and model_conv.py, each in its own
# process; then the matrix-unit tests and the split/tap tests on vulkan:0 (the part res45's tests did not reach)
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res46; mkdir -p $R; cp .gpu/run46.sh .gpu/model_mma.py .gpu/model_conv.py $R/
DEVICELAYER_CACHE=/tmp/dlc-a timeout 60 python3 .gpu/model_mma.py --seconds 2 --model resnet50 > $R/model-mma.log 2>&1; echo "mma rc=$?" >> $R/rc.txt
DEVICELAYER_CACHE=/tmp/dlc-b timeout 60 python3 .gpu/model_conv.py --device vulkan:0 --dtype float16 --seconds 2 > $R/model-conv16.log 2>&1; echo "conv16 rc=$?" >> $R/rc.txt
DEVICELAYER_CACHE=/tmp/dlc-c timeout 60 python3 .gpu/model_conv.py --device vulkan:0 --dtype float16 --old --seconds 2 > $R/model-conv16-old.log 2>&1; echo "conv16 old rc=$?" >> $R/rc.txt
grep -h '"model"' $R/model-*.log
DEVICELAYER_TEST_DEVICES=vulkan:0 DEVICELAYER_CACHE=/tmp/dlc-t timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_matrix_units.py tests/test_tiled_pipelines.py -k "not products" > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
tail -1 $R/tests.log; cat $R/rc.txt
cd $OUT && tar -czf res46.tgz res46 && rm -rf res46

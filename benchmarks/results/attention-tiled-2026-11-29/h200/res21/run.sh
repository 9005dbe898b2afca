#!/bin/bash
# the final tree: on cuda:0 the attention pattern kept only where the fused kernel runs; the pattern and form tests
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res21; mkdir -p $R; cp .gpu/run21.sh $R/run.sh
DEVICELAYER_TEST_DEVICES=cuda:0,opencl:0,vulkan:0 DEVICELAYER_CACHE=/tmp/dlc-t timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_attention_pattern.py tests/test_attention_forms.py -k "pattern or recognised or default_forms or masked or transposed" > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
tail -2 $R/tests.log; cat $R/rc.txt
cd $OUT && tar -czf res21.tgz res21 && rm -rf res21

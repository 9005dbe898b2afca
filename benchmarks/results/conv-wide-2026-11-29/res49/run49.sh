#!/bin/bash
# the final rule (4 x 8 tiles for groups of 64 channels or fewer, GPU_CONV_PIPELINE on every GPU): ResNet-50's
# convolutions at b16 on the static rule; ResNet-50 b16 float32 before/after alternating, tuner on; GPU tests
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res49; mkdir -p $R; cp .gpu/run49.sh .gpu/probe_wide.py .gpu/model_conv.py $R/
git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt; git diff HEAD --stat >> $R/tree.txt
DEVICELAYER_CACHE=/tmp/dlc-s DEVICELAYER_TUNE=0 timeout 60 python3 .gpu/probe_wide.py vulkan:0 opencl:0 --static-only > $R/static32.log 2>&1; echo "static rc=$?" >> $R/rc.txt
grep "weighted" $R/static32.log
for pass in 1 2; do
for run in "vulkan:0 after" "vulkan:0 before" "opencl:0 after" "opencl:0 before"; do
  set -- $run; f=""; [ $2 = before ] && f="--before"
  DEVICELAYER_CACHE=/tmp/dlc-m-$1-$2-$pass timeout 55 python3 .gpu/model_conv.py --device $1 $f --seconds 2 > $R/model-${1/:/}-$2-$pass.log 2>&1; echo "model $run $pass rc=$?" >> $R/rc.txt
done
done
grep -h '"model"' $R/model-*.log
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_tiled_pipelines.py tests/test_matrix_units.py -k "choice or wide or rule or static" > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
tail -3 $R/tests.log; cat $R/rc.txt
cd $OUT && tar -czf res49.tgz res49 && rm -rf res49

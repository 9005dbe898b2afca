#!/bin/bash
# the final rule: K walked tap by tap (CINNER), split along K by SPLIT_FILL per edge, 64 x 64 tiles kept where a deep
# convolution splits: ResNet-50's geometries at b16 (float32 on both drivers, static choices; float16 on vulkan:0 with
# edges and splits), ResNet-50 b16 old/new, the tiled-pipeline and matrix-unit tests on the three NVIDIA devices
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res45; mkdir -p $R; cp .gpu/run45.sh .gpu/probe_conv32.py .gpu/model_conv.py $R/
DEVICELAYER_CACHE=/tmp/dlc-p timeout 100 python3 .gpu/probe_conv32.py vulkan:0 opencl:0 > $R/conv32.log 2>&1; echo "conv32 rc=$?" >> $R/rc.txt
tail -1 $R/conv32.log
DEVICELAYER_CACHE=/tmp/dlc-p16 timeout 120 python3 .gpu/probe_conv32.py vulkan:0 --dtype float16 --edges > $R/conv16.log 2>&1; echo "conv16 rc=$?" >> $R/rc.txt
tail -1 $R/conv16.log
for run in "vulkan:0 float32 new" "vulkan:0 float32 old" "opencl:0 float32 new" "vulkan:0 float16 new" "vulkan:0 float16 old"; do
  set -- $run; f=""; [ $3 = old ] && f="--old"
  DEVICELAYER_CACHE=/tmp/dlc-m-$3-$1-$2 timeout 60 python3 .gpu/model_conv.py --device $1 --dtype $2 $f --seconds 2 > $R/model-$1-$2-$3.log 2>&1; echo "model $run rc=$?" >> $R/rc.txt
done
grep -h '"model"' $R/model-*.log
DEVICELAYER_TEST_DEVICES=cuda:0,opencl:0,vulkan:0 DEVICELAYER_CACHE=/tmp/dlc-t timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_tiled_pipelines.py tests/test_matrix_units.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
tail -1 $R/tests.log; cat $R/rc.txt
cd $OUT && tar -czf res45.tgz res45 && rm -rf res45

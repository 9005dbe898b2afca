#!/bin/bash
# K walked tap by tap (CINNER) and split along K (SPLIT) in the tiled convolution: ResNet-50's convolution geometries
# at b16 timed as recordings (float32 on vulkan:0 and opencl:0: edges, forced splits), ResNet-50 b16 old/new on both,
# the convolution tests on the three NVIDIA devices, float16 geometries on vulkan:0
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res44; mkdir -p $R; cp .gpu/run44.sh .gpu/probe_conv32.py .gpu/model_conv.py $R/
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
DEVICELAYER_CACHE=/tmp/dlc-p timeout 230 python3 .gpu/probe_conv32.py vulkan:0 opencl:0 --edges > $R/conv32.log 2>&1; echo "conv32 rc=$?" >> $R/rc.txt
tail -1 $R/conv32.log
for d in vulkan:0 opencl:0; do for v in old new; do
  f=""; [ $v = old ] && f="--old"
  DEVICELAYER_CACHE=/tmp/dlc-m-$v-$d timeout 60 python3 .gpu/model_conv.py --device $d $f --seconds 2 > $R/model-$d-$v.log 2>&1; echo "model $d $v rc=$?" >> $R/rc.txt
done; done
grep -h '"model"' $R/model-*.log
DEVICELAYER_TEST_DEVICES=cuda:0,opencl:0,vulkan:0 DEVICELAYER_CACHE=/tmp/dlc-t timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_tiled_pipelines.py -k "split or integer or channels or convolution" > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
tail -1 $R/tests.log
DEVICELAYER_CACHE=/tmp/dlc-p16 timeout 40 python3 .gpu/probe_conv32.py vulkan:0 --dtype float16 > $R/conv16.log 2>&1; echo "conv16 rc=$?" >> $R/rc.txt
tail -1 $R/conv16.log; cat $R/rc.txt
cd $OUT && tar -czf res44.tgz res44 && rm -rf res44

#!/bin/bash
# unstrided 1x1 convolutions: one product per image (GEMM kernels) against the tiled convolution over all images
# (K tap by tap, split where the rule splits): ResNet-50's 1x1 layers at b16, then ResNet-50 b16 with each
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res47; mkdir -p $R; cp .gpu/run47.sh .gpu/probe_conv32.py .gpu/model_conv.py $R/
DEVICELAYER_CACHE=/tmp/dlc-p timeout 80 python3 .gpu/probe_conv32.py vulkan:0 opencl:0 --pointwise > $R/pointwise32.log 2>&1; echo "pw32 rc=$?" >> $R/rc.txt
tail -1 $R/pointwise32.log
DEVICELAYER_CACHE=/tmp/dlc-p16 timeout 50 python3 .gpu/probe_conv32.py vulkan:0 --dtype float16 --pointwise > $R/pointwise16.log 2>&1; echo "pw16 rc=$?" >> $R/rc.txt
tail -1 $R/pointwise16.log
for run in "vulkan:0 gemm" "vulkan:0 tiled" "opencl:0 gemm" "opencl:0 tiled"; do
  set -- $run; f=""; [ $2 = tiled ] && f="--pointwise-tiled"
  DEVICELAYER_CACHE=/tmp/dlc-m-$1-$2 timeout 45 python3 .gpu/model_conv.py --device $1 $f --seconds 2 > $R/model-${1/:/}-$2.log 2>&1; echo "model $run rc=$?" >> $R/rc.txt
done
grep -h '"model"' $R/model-*.log; cat $R/rc.txt
cd $OUT && tar -czf res47.tgz res47 && rm -rf res47

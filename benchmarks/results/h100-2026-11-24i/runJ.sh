#!/bin/bash
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
mkdir -p $OUT/cold-tune-off /tmp/models
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_tile_tuning.py tests/test_dtypes.py tests/test_host_stretch.py tests/test_faults.py > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/rc.txt
for d in opencl:0 vulkan:0; do
  DEVICELAYER_TUNE=0 timeout 150 python3 -m benchmarks.cold_start --models-dir /tmp/models --model resnet50 --model efficientnet_b0 --device $d --repeat 2 --out $OUT/cold-tune-off > $OUT/cold-tune-off/$(echo $d | tr : _).log 2>&1
  echo "$d rc=$?" >> $OUT/rc.txt
done

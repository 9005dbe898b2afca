#!/bin/bash
# float32 convolutions on vulkan:0 and opencl:0 with 16-deep K slices (two stages) against the 8-deep ones, ResNet-50's geometries at batch 16, cuDNN in float32 (no TF32); the shared-words test on every device
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res122; mkdir -p $R; cp .gpu/run122.sh .gpu/probe_conv16.py $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res122.tgz -C /tmp res122; }
DEVICELAYER_TEST_DEVICES=vulkan:0,cuda:0,opencl:0 timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_matrix_units.py -k "shared_words or views" > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
V="--dtype float32 --variant default --variant m4 --variant m8 --variant k16 --variant m4-k16 --variant m8-k16"
DEVICELAYER_CACHE=/tmp/dlc-v timeout 150 python3 .gpu/probe_conv16.py --device vulkan:0 $V > $R/vulkan.log 2>&1; echo "vulkan rc=$?" >> $R/rc.txt; pk
DEVICELAYER_CACHE=/tmp/dlc-o timeout 200 python3 .gpu/probe_conv16.py --device opencl:0 $V > $R/opencl.log 2>&1; echo "opencl rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; tail -1 $R/tests.log; grep sums $R/vulkan.log $R/opencl.log

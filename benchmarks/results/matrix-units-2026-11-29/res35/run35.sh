#!/bin/bash
# the MMA form, after the component-type fix (float16 on NVIDIA's cooperative matrices through Vulkan): probe, tests
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res35; mkdir -p $R; cp .gpu/run35.sh .gpu/probe_mma.py $R/
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
DEVICELAYER_CACHE=/tmp/dlc-p timeout 170 python3 .gpu/probe_mma.py --n 2048 --n 4096 --convs > $R/probe.log 2>&1; echo "probe rc=$?" >> $R/rc.txt
cat $R/probe.log | cut -c1-400
DEVICELAYER_TEST_DEVICES=cuda:0,opencl:0,vulkan:0 DEVICELAYER_CACHE=/tmp/dlc-t timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_matrix_units.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
grep -E "passed|failed|FAILED|Error" $R/tests.log | head -30
cat $R/rc.txt
cd $OUT && tar -czf res35.tgz res35 && rm -rf res35

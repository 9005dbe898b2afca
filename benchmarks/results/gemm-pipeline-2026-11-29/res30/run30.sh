#!/bin/bash
# the plain tiled GEMM with each element loaded and stored in one step again (no registers batch): edges 8, 4, 2;
# the pipeline tests on the GPU devices
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res30; mkdir -p $R; cp .gpu/run30.sh .gpu/probe_gemm.py $R/
P="timeout 60 python3 .gpu/probe_gemm.py opencl:0 vulkan:0"
DEVICELAYER_CACHE=/tmp/dlc-p $P --n 4096 --n 2048 --micro 8 --micro 4 --variant plain --variant default > $R/probe.log 2>&1; echo "probe rc=$?" >> $R/rc.txt
DEVICELAYER_CACHE=/tmp/dlc-p $P --n 2048 --micro 2 --variant plain >> $R/probe.log 2>&1; echo "probe2 rc=$?" >> $R/rc.txt
cat $R/probe.log
DEVICELAYER_TEST_DEVICES=cuda:0,opencl:0,vulkan:0 DEVICELAYER_CACHE=/tmp/dlc-t timeout 80 python3 -m pytest -q -p no:cacheprovider tests/test_tiled_pipelines.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
tail -2 $R/tests.log; cat $R/rc.txt
cd $OUT && tar -czf res30.tgz res30 && rm -rf res30

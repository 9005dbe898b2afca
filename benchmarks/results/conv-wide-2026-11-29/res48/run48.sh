#!/bin/bash
# wide (4 x 8) micro-tiles and vector reads in the tiled convolution: ResNet-50's geometries at b16, float32 on
# NVIDIA's Vulkan and OpenCL, float16 on Vulkan; then the wide tests on the GPU devices
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res48; mkdir -p $R; cp .gpu/run48.sh .gpu/probe_wide.py $R/
git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
DEVICELAYER_CACHE=/tmp/dlc-w32 DEVICELAYER_TUNE=0 timeout 330 python3 .gpu/probe_wide.py vulkan:0 opencl:0 > $R/wide32.log 2>&1; echo "w32 rc=$?" >> $R/rc.txt
tail -1 $R/wide32.log
DEVICELAYER_CACHE=/tmp/dlc-w16 DEVICELAYER_TUNE=0 timeout 110 python3 .gpu/probe_wide.py vulkan:0 --dtype float16 > $R/wide16.log 2>&1; echo "w16 rc=$?" >> $R/rc.txt
tail -1 $R/wide16.log
timeout 90 python3 -m pytest -q -x -p no:cacheprovider tests/test_tiled_pipelines.py tests/test_tile_tuning.py -k "wide or tuning or forcing" > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
tail -3 $R/tests.log; cat $R/rc.txt
cd $OUT && tar -czf res48.tgz res48 && rm -rf res48

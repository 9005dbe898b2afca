#!/bin/bash
# GEMM pipeline variants at micro-tile edges 8, 4, 2; the product, epilogue and tile tests on the GPU devices
# (cuda:0's tiled products with epilogues take the pipeline too); benchmarks.gemm
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res24; mkdir -p $R; cp .gpu/run24.sh .gpu/probe_gemm.py $R/
nvidia-smi > $R/gpu.txt 2>&1
P="timeout 150 python3 .gpu/probe_gemm.py opencl:0 vulkan:0"
DEVICELAYER_CACHE=/tmp/dlc-p $P --n 4096 --micro 8 --variant plain --variant default --variant G-warp --variant G-sw4 --variant G-sw16 --variant G-nosw --variant G-k16 --variant G-novec --variant G-novec-noruns > $R/probe8.log 2>&1; echo "probe8 rc=$?" >> $R/rc.txt
cat $R/probe8.log
DEVICELAYER_CACHE=/tmp/dlc-p $P --n 4096 --n 2048 --micro 4 --variant plain --variant G --variant G-warp --variant G-novec --variant G-novec-noruns > $R/probe4.log 2>&1; echo "probe4 rc=$?" >> $R/rc.txt
cat $R/probe4.log
DEVICELAYER_CACHE=/tmp/dlc-p $P --n 2048 --n 1024 --micro 2 --variant plain --variant G-novec --variant G-novec-noruns > $R/probe2.log 2>&1; echo "probe2 rc=$?" >> $R/rc.txt
DEVICELAYER_CACHE=/tmp/dlc-p $P --n 2048 --micro 8 --variant default >> $R/probe2.log 2>&1; echo "probe2b rc=$?" >> $R/rc.txt
cat $R/probe2.log
DEVICELAYER_TEST_DEVICES=cuda:0,opencl:0,vulkan:0 DEVICELAYER_CACHE=/tmp/dlc-t timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_ops_matmul_props.py tests/test_epilogue.py tests/test_tile_tuning.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
tail -3 $R/tests.log
DEVICELAYER_CACHE=/tmp/dlc-g timeout 120 python3 -m benchmarks.run --only gemm --devices cuda:0,opencl:0,vulkan:0 --out $R/gemm > $R/gemm.log 2>&1; echo "gemm rc=$?" >> $R/rc.txt
grep -i "cuBLAS\|tflop" $R/gemm.log | cut -c1-200 | head -20
cat $R/rc.txt
cd $OUT && tar -czf res24.tgz res24 && rm -rf res24

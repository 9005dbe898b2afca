#!/bin/bash
# the final tree: product/convolution/pipeline tests on the GPU devices; tile shapes against cuBLAS before (378e9ee)
# and after; benchmarks.gemm; ResNet-50 and GPT-2 at batch 16 on NVIDIA's OpenCL and Vulkan against eager, before
# and after (one process a tree)
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res28; mkdir -p $R /tmp/before; tar -xzf .gpu/before-378.tar.gz -C /tmp/before; cp .gpu/run28.sh $R/run.sh
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
DEVICELAYER_TEST_DEVICES=cuda:0,opencl:0,vulkan:0 DEVICELAYER_CACHE=/tmp/dlc-t timeout 170 python3 -m pytest -q -p no:cacheprovider tests/test_tiled_pipelines.py tests/test_ops_matmul_props.py tests/test_epilogue.py tests/test_tile_tuning.py tests/test_cuda_conv.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
tail -3 $R/tests.log
T="--device opencl:0 --device vulkan:0 --gemm 4096 --gemm 2048 --conv r50-3x3-64 --conv r50-3x3-256 --conv r50-1x1-1024-256 --rounds 3"
DEVICELAYER_CACHE=/tmp/dlc-ta timeout 100 python3 -m benchmarks.tile_tuning $T --out $R/tiles-after > $R/tiles-after.log 2>&1; echo "tiles after rc=$?" >> $R/rc.txt
(cd /tmp/before && DEVICELAYER_CACHE=/tmp/dlc-tb PYTHONPATH=/tmp/site:/tmp/before timeout 100 python3 -m benchmarks.tile_tuning $T --out $R/tiles-before > $R/tiles-before.log 2>&1; echo "tiles before rc=$?" >> $R/rc.txt)
grep -h "│" $R/tiles-before.log $R/tiles-after.log | cut -c1-170
DEVICELAYER_CACHE=/tmp/dlc-g timeout 60 python3 -m benchmarks.run --only gemm --devices cuda:0,opencl:0,vulkan:0 --out $R/gemm > $R/gemm.log 2>&1; echo "gemm rc=$?" >> $R/rc.txt
grep "│" $R/gemm.log | cut -c1-120
G="--device opencl:0 --device vulkan:0 --model resnet50 --model gpt2 --batch 16 --compile none --seconds 0.5"
(cd /tmp/before && DEVICELAYER_CACHE=/tmp/dlc-mb PYTHONPATH=/tmp/site:/tmp/before timeout 110 python3 -m benchmarks.gpu_vs_torch $G --out $R/models-before > $R/models-before.log 2>&1; echo "models before rc=$?" >> $R/rc.txt)
DEVICELAYER_CACHE=/tmp/dlc-ma timeout 110 python3 -m benchmarks.gpu_vs_torch $G --out $R/models-after > $R/models-after.log 2>&1; echo "models after rc=$?" >> $R/rc.txt
grep -h "float32: " $R/models-before.log $R/models-after.log | cut -c1-300
cat $R/rc.txt
cd $OUT && tar -czf res28.tgz res28 && rm -rf res28

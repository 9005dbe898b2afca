#!/bin/bash
# final kernels (runs of 4 on CPU devices and GLSL, strided elsewhere): tests on every device, tile benchmark, ResNet-50
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res; mkdir -p $R/before $R/after /tmp/before
tar -xzf .gpu/before.tar.gz -C /tmp/before
nvidia-smi -L > $R/machine.txt 2>&1; lscpu | grep "Model name" >> $R/machine.txt
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_ops_matmul_props.py tests/test_epilogue.py tests/test_load_once.py tests/test_tile_tuning.py tests/test_ops.py -k "conv or matmul or gemm or epilogue or load or tile or tuned or kernels" > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
export DEVICELAYER_CACHE=/tmp/dlc-after
timeout 90 python3 -m benchmarks.tile_tuning --device opencl:0 --device vulkan:0 --rounds 2 --budget 0.2 --out $R/after > $R/after/tiles.log 2>&1; echo "after tiles rc=$?" >> $R/rc.txt
M="--device opencl:0 --device vulkan:0 --model resnet50 --batch 16 --compile none --seconds 2"
timeout 70 python3 -m benchmarks.gpu_vs_torch $M --out $R/after/m1 > $R/after/m1.log 2>&1; echo "after m1 rc=$?" >> $R/rc.txt
( cd /tmp/before && export PYTHONPATH=/tmp/site:/tmp/before DEVICELAYER_CACHE=/tmp/dlc-before
  timeout 70 python3 -m benchmarks.gpu_vs_torch $M --out $R/before/m1 > $R/before/m1.log 2>&1; echo "before m1 rc=$?" >> $R/rc.txt )
tar -czf $OUT/res.tgz -C /tmp res

#!/bin/bash
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
export DEVICELAYER_CACHE=/tmp/dlc-c
timeout 200 python3 .gpu/bk.py opencl:0 vulkan:0 > $OUT/bk.log 2>&1; echo "bk rc=$?" > $OUT/rc.txt; cp /tmp/bk.json $OUT/ 2>/dev/null
timeout 280 python3 -m pytest -q -p no:cacheprovider tests/test_tile_tuning.py tests/test_ops_matmul_props.py tests/test_host_stretch.py tests/test_fusion.py > $OUT/tests.log 2>&1
echo "tests rc=$?" >> $OUT/rc.txt
# exit-time crash: the landed tree and this one, one small case each
mkdir -p /tmp/before && tar -xzf .gpu/before.tar.gz -C /tmp/before
(cd /tmp/before && PYTHONPATH=/tmp/before timeout 100 python3 -m benchmarks.gpu_vs_torch --device opencl:0 --device vulkan:0 --model mobilenet_v2 --batch 1 --compile none --seconds 0.3 --out /tmp/o1 > $OUT/exit_before.log 2>&1; echo "before rc=$?" >> $OUT/rc.txt)
timeout 100 python3 -m benchmarks.gpu_vs_torch --device opencl:0 --device vulkan:0 --model mobilenet_v2 --batch 1 --compile none --seconds 0.3 --out /tmp/o2 > $OUT/exit_after.log 2>&1; echo "after rc=$?" >> $OUT/rc.txt

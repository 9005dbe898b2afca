#!/bin/bash
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
export DEVICELAYER_CACHE=/tmp/dlc-f
git log -1 --format=%H > $OUT/rc.txt 2>&1
a="--device opencl:0 --device vulkan:0 --model mobilenet_v2 --batch 1 --compile none --seconds 0.3"
for i in 1 2 3; do timeout 100 python3 -m benchmarks.gpu_vs_torch $a --out /tmp/oF$i > $OUT/exit$i.log 2>&1; echo "exit check $i rc=$?" >> $OUT/rc.txt; done
timeout 360 python3 -m pytest -q -p no:cacheprovider tests/test_tile_tuning.py tests/test_ops_matmul_props.py tests/test_host_stretch.py tests/test_fusion.py tests/test_recording.py tests/test_faults.py > $OUT/tests.log 2>&1
echo "tests rc=$?" >> $OUT/rc.txt

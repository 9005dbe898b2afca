#!/bin/bash
# tile benchmark on NVIDIA OpenCL and Vulkan, then the tests of this change on every device
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
export DEVICELAYER_CACHE=/tmp/dlc-a
mkdir -p $OUT/tiles
nvidia-smi -L > $OUT/machine.txt 2>&1; nproc >> $OUT/machine.txt; git log -1 --format=%H >> $OUT/machine.txt 2>&1
python3 -c "import devicelayer as dl; [print(d.id, d.info.name, d.info.driver_version) for d in dl.devices()]" >> $OUT/machine.txt 2>&1
timeout 300 python3 -m benchmarks.tile_tuning --device opencl:0 --device vulkan:0 --rounds 3 --budget 0.2 --out $OUT/tiles > $OUT/tiles/tile.log 2>&1
echo "tile rc=$?" >> $OUT/machine.txt
timeout 250 python3 -m pytest -q -p no:cacheprovider tests/test_tile_tuning.py tests/test_ops_matmul_props.py tests/test_host_stretch.py tests/test_fusion.py -x > $OUT/tests.log 2>&1
echo "tests rc=$?" >> $OUT/machine.txt

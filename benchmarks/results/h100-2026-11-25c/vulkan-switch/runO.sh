#!/bin/bash
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
mkdir -p /tmp/models
python3 -c "
from pathlib import Path
from benchmarks.arch_models import ARCHS, export
export(ARCHS['shufflenet_v2'], Path('/tmp/models/shufflenet_v2.onnx'))
" > $OUT/export.log 2>&1
export DEVICELAYER_CACHE=/tmp/dlc-o
for i in 1 2; do
timeout 100 python3 .gpu/vkfused.py /tmp/models/shufflenet_v2.onnx > $OUT/default-$i.log 2>&1
SWITCH=0.0002 timeout 100 python3 .gpu/vkfused.py /tmp/models/shufflenet_v2.onnx > $OUT/switch-$i.log 2>&1
done

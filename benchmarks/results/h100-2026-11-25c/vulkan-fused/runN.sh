#!/bin/bash
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
mkdir -p /tmp/models
python3 -c "
from pathlib import Path
from benchmarks.arch_models import ARCHS, export
export(ARCHS['shufflenet_v2'], Path('/tmp/models/shufflenet_v2.onnx'))
" > $OUT/export.log 2>&1
DEVICELAYER_CACHE=/tmp/dlc-n1 timeout 150 python3 .gpu/vkfused.py /tmp/models/shufflenet_v2.onnx > $OUT/tuned-fresh.log 2>&1
DEVICELAYER_CACHE=/tmp/dlc-n1 timeout 150 python3 .gpu/vkfused.py /tmp/models/shufflenet_v2.onnx > $OUT/tuned-stored.log 2>&1
DEVICELAYER_CACHE=/tmp/dlc-n2 DEVICELAYER_TUNE=0 timeout 150 python3 .gpu/vkfused.py /tmp/models/shufflenet_v2.onnx > $OUT/untuned.log 2>&1

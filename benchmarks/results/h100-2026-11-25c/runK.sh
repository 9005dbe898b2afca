#!/bin/bash
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
export DEVICELAYER_CACHE=/tmp/dlc-k DEVICELAYER_BACKENDS=host
python3 -c "
import zipfile,glob
z=zipfile.ZipFile(glob.glob('.gpu/whl/onednn*.whl')[0]); open('/tmp/libdnnl.so.3','wb').write(z.read([n for n in z.namelist() if n.endswith('lib/libdnnl.so.3')][0]))"
export DEVICELAYER_ONEDNN=/tmp/libdnnl.so.3
mkdir -p /tmp/models
python3 -c "
from pathlib import Path
from benchmarks.arch_models import ARCHS, export
for a in ARCHS.values():
    if a.name in ('mobilenet_v2',): export(a, Path('/tmp/models')/(a.name+'.onnx'))
" > $OUT/export.log 2>&1
timeout 100 python3 .gpu/inplace.py mobilenet_v2 40 > $OUT/inplace16.log 2>&1
timeout 100 python3 .gpu/orttop.py mobilenet_v2 40 > $OUT/ort16.log 2>&1
for t in 8 4; do OMP_NUM_THREADS=$t timeout 100 python3 .gpu/inplace.py mobilenet_v2 40 > $OUT/inplace-omp$t.log 2>&1; done
timeout 100 python3 -m benchmarks.host_vs_onnxruntime --models-dir /tmp/models --model mobilenet_v2 --rounds 5 --block 0.2 --out /tmp/o16 > $OUT/bench16.log 2>&1
OMP_NUM_THREADS=8 timeout 100 python3 -m benchmarks.host_vs_onnxruntime --models-dir /tmp/models --model mobilenet_v2 --rounds 5 --block 0.2 --out /tmp/o8 > $OUT/bench-omp8.log 2>&1

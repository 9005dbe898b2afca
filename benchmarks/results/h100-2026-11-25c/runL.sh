#!/bin/bash
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
export DEVICELAYER_CACHE=/tmp/dlc-l DEVICELAYER_BACKENDS=host
python3 -c "
import zipfile,glob
z=zipfile.ZipFile(glob.glob('.gpu/whl/onednn*.whl')[0]); open('/tmp/libdnnl.so.3','wb').write(z.read([n for n in z.namelist() if n.endswith('lib/libdnnl.so.3')][0]))"
export DEVICELAYER_ONEDNN=/tmp/libdnnl.so.3
mkdir -p /tmp/models /tmp/res && cp .gpu/msmall/*.onnx /tmp/models/
python3 -c "
from pathlib import Path
from benchmarks.arch_models import ARCHS, export
for n in ('mobilenet_v2', 'shufflenet_v2', 'efficientnet_b0'):
    export(ARCHS[n], Path('/tmp/models')/(n+'.onnx'))
" > /tmp/res/export.log 2>&1
for pass in 1 2; do
for m in mobilenet_v2 shufflenet_v2 efficientnet_b0 ocr_classifier squeezenet; do
 for f in 4e6 1e6 2.5e5 0; do
  timeout 60 python3 .gpu/smallflops.py $f --models-dir /tmp/models --model $m --rounds 5 --block 0.2 --out /tmp/res/sf/$f --tag sf$f-$pass > /tmp/res/$m-$f-$pass.log 2>&1
 done
done
tar -czf $OUT/res.tgz -C /tmp res
done

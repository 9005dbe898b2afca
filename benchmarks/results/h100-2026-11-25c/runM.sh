#!/bin/bash
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
export DEVICELAYER_CACHE=/tmp/dlc-m
python3 -c "
import zipfile,glob
z=zipfile.ZipFile(glob.glob('.gpu/whl/onednn*.whl')[0]); open('/tmp/libdnnl.so.3','wb').write(z.read([n for n in z.namelist() if n.endswith('lib/libdnnl.so.3')][0]))"
export DEVICELAYER_ONEDNN=/tmp/libdnnl.so.3
mkdir -p /tmp/before /tmp/models /tmp/res && tar -xzf .gpu/before.tar.gz -C /tmp/before && cp .gpu/msmall/*.onnx /tmp/models/
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_host_omp.py tests/test_host_onednn.py tests/test_host_stretch.py tests/test_lane.py > /tmp/res/tests.log 2>&1; echo "tests rc=$?" >> /tmp/res/rc.txt
python3 -c "
from pathlib import Path
from benchmarks.arch_models import ARCHS, export
for n in ('mobilenet_v2', 'shufflenet_v2', 'efficientnet_b0', 'regnet_y_400mf'):
    export(ARCHS[n], Path('/tmp/models')/(n+'.onnx'))
" > /tmp/res/export.log 2>&1
export DEVICELAYER_BACKENDS=host
for pass in 1 2; do
 for m in efficientnet_b0 regnet_y_400mf mobilenet_v2 ocr_classifier bert_64 whisper_encoder_64 crnn squeezenet shufflenet_v2; do
  (cd /tmp/before && PYTHONPATH=/tmp/site:/tmp/before timeout 60 python3 -m benchmarks.host_vs_onnxruntime --models-dir /tmp/models --model $m --rounds 5 --block 0.2 --out /tmp/res/host16/before --tag before-$pass > /tmp/res/h-before-$m-$pass.log 2>&1; echo "before $m $pass rc=$?" >> /tmp/res/rc.txt)
  (timeout 60 python3 -m benchmarks.host_vs_onnxruntime --models-dir /tmp/models --model $m --rounds 5 --block 0.2 --out /tmp/res/host16/after --tag after-$pass > /tmp/res/h-after-$m-$pass.log 2>&1; echo "after $m $pass rc=$?" >> /tmp/res/rc.txt)
 done
 tar -czf $OUT/res.tgz -C /tmp res
done

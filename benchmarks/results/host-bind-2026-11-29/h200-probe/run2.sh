#!/bin/bash
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res2; mkdir -p $R /tmp/models; cp .gpu/run2.sh .gpu/probe.py $R/
python3 -c "
import zipfile,glob
z=zipfile.ZipFile(glob.glob('.gpu/whl/onednn*.whl')[0]); open('/tmp/libdnnl.so.3','wb').write(z.read([n for n in z.namelist() if n.endswith('lib/libdnnl.so.3')][0]))"
export DEVICELAYER_ONEDNN=/tmp/libdnnl.so.3 DEVICELAYER_BACKENDS=host DEVICELAYER_CACHE=/tmp/dlc-h
cp .gpu/msmall/*.onnx /tmp/models/
timeout 120 python3 .gpu/probe.py crnn ocr_classifier bert_64 whisper_encoder_64 squeezenet > $R/probe.log 2>&1
for m in crnn whisper_encoder_64; do timeout 60 python3 -m benchmarks.host_overhead ops /tmp/models/$m.onnx --reps 100 >> $R/ops.log 2>&1; done
for m in ocr_classifier crnn bert_64 whisper_encoder_64; do timeout 90 python3 -m benchmarks.host_overhead bound /tmp/models/$m.onnx >> $R/bound.log 2>&1; done
cat $R/probe.log $R/ops.log $R/bound.log

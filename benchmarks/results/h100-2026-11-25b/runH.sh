#!/bin/bash
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
export DEVICELAYER_CACHE=/tmp/dlc-h DEVICELAYER_BACKENDS=host
R=$PWD
python3 -c "
import zipfile,glob
z=zipfile.ZipFile(glob.glob('.gpu/whl/onednn*.whl')[0]); open('/tmp/libdnnl.so.3','wb').write(z.read([n for n in z.namelist() if n.endswith('lib/libdnnl.so.3')][0]))"
export DEVICELAYER_ONEDNN=/tmp/libdnnl.so.3
mkdir -p /tmp/before /tmp/res && tar -xzf .gpu/before.tar.gz -C /tmp/before
nproc > /tmp/res/machine.txt
for pass in 1 2 3; do
 for m in crnn bert_64 ocr_classifier whisper_encoder_64; do
  (cd /tmp/before && PYTHONPATH=/tmp/site:/tmp/before timeout 60 python3 -m benchmarks.host_vs_onnxruntime --models-dir $R/.gpu/msmall --model $m --rounds 5 --block 0.2 --out /tmp/res/host16/before --tag before-$pass > /tmp/res/h-before-$m-$pass.log 2>&1; echo "before $m $pass rc=$?" >> /tmp/res/rc.txt)
  (timeout 60 python3 -m benchmarks.host_vs_onnxruntime --models-dir $R/.gpu/msmall --model $m --rounds 5 --block 0.2 --out /tmp/res/host16/after --tag after-$pass > /tmp/res/h-after-$m-$pass.log 2>&1; echo "after $m $pass rc=$?" >> /tmp/res/rc.txt)
 done
 tar -czf $OUT/res.tgz -C /tmp res
done

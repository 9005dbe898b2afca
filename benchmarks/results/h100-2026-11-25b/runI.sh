#!/bin/bash
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
export DEVICELAYER_CACHE=/tmp/dlc-i DEVICELAYER_BACKENDS=host MS=$PWD/.gpu/msmall
python3 -c "
import zipfile,glob
z=zipfile.ZipFile(glob.glob('.gpu/whl/onednn*.whl')[0]); open('/tmp/libdnnl.so.3','wb').write(z.read([n for n in z.namelist() if n.endswith('lib/libdnnl.so.3')][0]))"
export DEVICELAYER_ONEDNN=/tmp/libdnnl.so.3
mkdir -p /tmp/before && tar -xzf .gpu/before.tar.gz -C /tmp/before
cp .gpu/bcheck.py /tmp/bcheck.py
for pass in 1 2; do for m in bert_64 crnn; do
  echo "== before $m $pass" >> $OUT/bcheck.log; (cd /tmp/before && PYTHONPATH=/tmp/site:/tmp/before timeout 60 python3 /tmp/bcheck.py $m 2>&1 | grep -v Warn >> $OUT/bcheck.log)
  echo "== after $m $pass" >> $OUT/bcheck.log; (timeout 60 python3 /tmp/bcheck.py $m 2>&1 | grep -v Warn >> $OUT/bcheck.log)
done; done

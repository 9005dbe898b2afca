#!/bin/bash
# the host on the GPU machine's 16 cores (oneDNN from the carried wheel): huge-page blocks on and off in one process
# per model, onnxruntime's CPU provider beside (16 threads)
source .gpu/enter.sh
R=/tmp/res58; mkdir -p $R /tmp/models; cp .gpu/run58.sh .gpu/ab_huge.py $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res58.tgz -C /tmp res58; }
cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag > $R/thp.txt 2>&1; uname -r >> $R/thp.txt; lscpu | grep -E "Model name|^CPU\(s\)|L2|L3" >> $R/thp.txt
python3 -c "
import zipfile,glob
z=zipfile.ZipFile(glob.glob('.gpu/whl/onednn*.whl')[0]); open('/tmp/libdnnl.so.3','wb').write(z.read([n for n in z.namelist() if n.endswith('lib/libdnnl.so.3')][0]))"
export DEVICELAYER_ONEDNN=/tmp/libdnnl.so.3 DEVICELAYER_BACKENDS=host
timeout 90 python3 -m benchmarks.arch_models --models-dir /tmp/models --model efficientnet_b0 --model mobilenet_v2 --model bert --model densenet121 > $R/export.log 2>&1; pk
timeout 120 python3 .gpu/ab_huge.py /tmp/models/efficientnet_b0.onnx /tmp/models/mobilenet_v2.onnx /tmp/models/bert.onnx /tmp/models/densenet121.onnx > $R/ab.log 2>&1; echo "ab rc=$?" >> $R/rc.txt; pk
cat $R/thp.txt $R/rc.txt; grep -v Warn $R/ab.log | tail -6

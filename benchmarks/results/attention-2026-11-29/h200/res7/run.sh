#!/bin/bash
# attention pattern: tests on every device, the pattern benchmark on the transformers families, and the GPU rows of
# BERT and GPT-2 (batch 1 and 16, float32, against PyTorch eager): the landed tree 5fc8b34 (before) and this tree
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res7; mkdir -p $R /tmp/before; tar -xzf .gpu/before-5fc.tar.gz -C /tmp/before
cp .gpu/run7.sh $R/run.sh
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1; lscpu | grep -E "Model name|^CPU\(s\)" >> $R/gpu.txt
python3 -c "
import zipfile,glob
z=zipfile.ZipFile(glob.glob('.gpu/whl/onednn*.whl')[0]); open('/tmp/libdnnl.so.3','wb').write(z.read([n for n in z.namelist() if n.endswith('lib/libdnnl.so.3')][0]))"
export DEVICELAYER_ONEDNN=/tmp/libdnnl.so.3
python3 -m devicelayer info > $R/info.txt 2>&1
DEVICELAYER_CACHE=/tmp/dlc-t timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_attention_pattern.py tests/test_host_onednn_attention.py tests/test_onnx_norm.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
tail -3 $R/tests.log
DEVICELAYER_CACHE=/tmp/dlc-p timeout 220 python3 -m benchmarks.attention_pattern --seconds 0.15 --models-dir /tmp/tfm --out $R/pattern > $R/pattern.log 2>&1; echo "pattern rc=$?" >> $R/rc.txt
grep -v -i warn $R/pattern.log | tail -40
DEVICELAYER_CACHE=/tmp/dlc-t timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_onnx_node_suite.py -k "attention or Attention" > $R/node-suite.log 2>&1; echo "node suite rc=$?" >> $R/rc.txt
tail -3 $R/node-suite.log
cat $R/rc.txt
cd $OUT && tar -czf res7.tgz res7 && rm -rf res7

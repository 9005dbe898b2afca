#!/bin/bash
# the final tree of this stop: tests on every device, the GPU rows of BERT and GPT-2 (batch 1 and 16, float32, against
# PyTorch eager; the landed tree 5fc8b34 before), the attention pattern on the transformers families, the host's
# attention on the 16 cores (host_overhead attention), the node suite's softmax, normalization and attention cases
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res10; mkdir -p $R /tmp/before; tar -xzf .gpu/before-5fc.tar.gz -C /tmp/before
cp .gpu/run10.sh $R/run.sh
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1; lscpu | grep -E "Model name|^CPU\(s\)" >> $R/gpu.txt
python3 -c "
import zipfile,glob
z=zipfile.ZipFile(glob.glob('.gpu/whl/onednn*.whl')[0]); open('/tmp/libdnnl.so.3','wb').write(z.read([n for n in z.namelist() if n.endswith('lib/libdnnl.so.3')][0]))"
export DEVICELAYER_ONEDNN=/tmp/libdnnl.so.3
git log --oneline -1 > $R/tree.txt 2>/dev/null
DEVICELAYER_CACHE=/tmp/dlc-t timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_attention_pattern.py tests/test_host_onednn_attention.py tests/test_row_kernels.py tests/test_onnx_norm.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
tail -2 $R/tests.log
G="--device cuda:0 --device opencl:0 --device vulkan:0 --model bert --model gpt2 --batch 1 --batch 16 --compile none --seconds 0.6"
(cd /tmp/before && DEVICELAYER_CACHE=/tmp/dlc-b PYTHONPATH=/tmp/site:/tmp/before timeout 100 python3 -m benchmarks.gpu_vs_torch $G --out $R/before > $R/before.log 2>&1; echo "before rc=$?" >> $R/rc.txt)
(DEVICELAYER_CACHE=/tmp/dlc-a timeout 100 python3 -m benchmarks.gpu_vs_torch $G --out $R/after > $R/after.log 2>&1; echo "after rc=$?" >> $R/rc.txt)
grep -E "float32: " $R/before.log $R/after.log | cut -c1-330
DEVICELAYER_CACHE=/tmp/dlc-p timeout 120 python3 -m benchmarks.attention_pattern --seconds 0.15 --models-dir /tmp/tfm --out $R/pattern > $R/pattern.log 2>&1; echo "pattern rc=$?" >> $R/rc.txt
grep -v -i warn $R/pattern.log | tail -31
mkdir -p /tmp/m; timeout 60 python3 -m benchmarks.arch_models --models-dir /tmp/m --model bert --model bert_64 --model whisper_encoder_64 > $R/export.log 2>&1
for m in bert bert_64 whisper_encoder_64; do DEVICELAYER_CACHE=/tmp/dlc-h timeout 45 python3 -m benchmarks.host_overhead attention /tmp/m/$m.onnx --rounds 8 >> $R/host16.log 2>&1; done
cat $R/host16.log | grep "us a run"
DEVICELAYER_CACHE=/tmp/dlc-t timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_onnx_node_suite.py -k "softmax or normalization or attention or Attention" > $R/node-suite.log 2>&1; echo "node suite rc=$?" >> $R/rc.txt
tail -1 $R/node-suite.log
cat $R/rc.txt
cd $OUT && tar -czf res10.tgz res10 && rm -rf res10

#!/bin/bash
# attention pattern with a work-group per long row of scores, row kernels: tests on every device, the GPU rows of
# BERT and GPT-2 (batch 1 and 16, float32, against PyTorch eager): the landed tree 5fc8b34 (before) and this tree
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res9; mkdir -p $R /tmp/before; tar -xzf .gpu/before-5fc.tar.gz -C /tmp/before
cp .gpu/run9.sh $R/run.sh
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1; lscpu | grep -E "Model name|^CPU\(s\)" >> $R/gpu.txt
python3 -c "
import zipfile,glob
z=zipfile.ZipFile(glob.glob('.gpu/whl/onednn*.whl')[0]); open('/tmp/libdnnl.so.3','wb').write(z.read([n for n in z.namelist() if n.endswith('lib/libdnnl.so.3')][0]))"
export DEVICELAYER_ONEDNN=/tmp/libdnnl.so.3
DEVICELAYER_CACHE=/tmp/dlc-t timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_attention_pattern.py tests/test_row_kernels.py tests/test_onnx_norm.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
tail -3 $R/tests.log
DEVICELAYER_CACHE=/tmp/dlc-t timeout 90 python3 .gpu/probe_attn.py cuda:0 opencl:0 vulkan:0 > $R/probe.log 2>&1; echo "probe rc=$?" >> $R/rc.txt
cp .gpu/probe_attn.py $R/
grep -v -i warn $R/probe.log | cut -c1-300
G="--device cuda:0 --device opencl:0 --device vulkan:0 --model bert --model gpt2 --batch 1 --batch 16 --compile none --seconds 0.6"
(cd /tmp/before && DEVICELAYER_CACHE=/tmp/dlc-b PYTHONPATH=/tmp/site:/tmp/before timeout 150 python3 -m benchmarks.gpu_vs_torch $G --out $R/before > $R/before.log 2>&1; echo "before rc=$?" >> $R/rc.txt)
(DEVICELAYER_CACHE=/tmp/dlc-a timeout 150 python3 -m benchmarks.gpu_vs_torch $G --out $R/after > $R/after.log 2>&1; echo "after rc=$?" >> $R/rc.txt)
cat $R/rc.txt; grep -E "float32: " $R/before.log $R/after.log | cut -c1-400
cd $OUT && tar -czf res9.tgz res9 && rm -rf res9

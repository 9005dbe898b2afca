#!/bin/bash
# the final tree: attention, pattern and op tests on the GPU devices; the GPU rows of BERT-mini and the GPT-2 LM
# before (bc09ea1) / after, one process each
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res20; mkdir -p $R /tmp/before; tar -xzf .gpu/before-bc0.tar.gz -C /tmp/before
cp .gpu/run20.sh $R/run.sh
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
DEVICELAYER_TEST_DEVICES=cuda:0,opencl:0,vulkan:0 DEVICELAYER_CACHE=/tmp/dlc-t timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_attention_forms.py tests/test_attention_pattern.py tests/test_ops.py -k "attention or Attention or forms" > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
tail -2 $R/tests.log
G="--device cuda:0 --device opencl:0 --device vulkan:0 --model bert --model gpt2 --batch 1 --batch 16 --compile none --seconds 0.5"
(cd /tmp/before && DEVICELAYER_CACHE=/tmp/dlc-b PYTHONPATH=/tmp/site:/tmp/before timeout 90 python3 -m benchmarks.gpu_vs_torch $G --out $R/before > $R/before.log 2>&1; echo "before rc=$?" >> $R/rc.txt)
(DEVICELAYER_CACHE=/tmp/dlc-a timeout 90 python3 -m benchmarks.gpu_vs_torch $G --out $R/after > $R/after.log 2>&1; echo "after rc=$?" >> $R/rc.txt)
grep -E "float32: " $R/before.log $R/after.log | cut -c1-300
cat $R/rc.txt
cd $OUT && tar -czf res20.tgz res20 && rm -rf res20

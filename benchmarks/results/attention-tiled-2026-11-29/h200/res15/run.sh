#!/bin/bash
# the tiled attention kernel: tests on every device, attention forms per device against cuBLAS nodes and torch SDPA,
# the GPU rows of BERT-mini and the GPT-2 LM before (bc09ea1) / after, the attention pattern's kernel counts
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res15; mkdir -p $R /tmp/before; tar -xzf .gpu/before-bc0.tar.gz -C /tmp/before
cp .gpu/run15.sh $R/run.sh
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1; lscpu | grep -E "Model name|^CPU\(s\)" >> $R/gpu.txt
DEVICELAYER_CACHE=/tmp/dlc-t timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_attention_forms.py tests/test_attention_pattern.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
tail -3 $R/tests.log
DEVICELAYER_CACHE=/tmp/dlc-f timeout 150 python3 -m benchmarks.attention_forms --device cuda:0 --device opencl:0 --device vulkan:0 --mask --seconds 0.1 --shape 1x12x128x64 --shape 16x12x128x64 --shape 16x4x128x64 --shape 1x12x197x64 --shape 1x6x1500x64 --shape 4x16x512x64 --shape 2x8x256x128 --out $R/forms > $R/forms.log 2>&1; echo "forms rc=$?" >> $R/rc.txt
cat $R/forms.log | grep -v -i warn
G="--device cuda:0 --device opencl:0 --device vulkan:0 --model bert --model gpt2 --batch 1 --batch 16 --compile none --seconds 0.6"
(cd /tmp/before && DEVICELAYER_CACHE=/tmp/dlc-b PYTHONPATH=/tmp/site:/tmp/before timeout 100 python3 -m benchmarks.gpu_vs_torch $G --out $R/before > $R/before.log 2>&1; echo "before rc=$?" >> $R/rc.txt)
(DEVICELAYER_CACHE=/tmp/dlc-a timeout 100 python3 -m benchmarks.gpu_vs_torch $G --out $R/after > $R/after.log 2>&1; echo "after rc=$?" >> $R/rc.txt)
grep -E "float32: " $R/before.log $R/after.log | cut -c1-330
cat $R/rc.txt
cd $OUT && tar -czf res15.tgz res15 && rm -rf res15

#!/bin/bash
# the tiled attention kernel with lanes: tests on every device, attention forms and lane counts per device against
# cuBLAS nodes and torch SDPA, the GPU rows of BERT-mini and the GPT-2 LM before (bc09ea1) / after
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res16; mkdir -p $R /tmp/before; tar -xzf .gpu/before-bc0.tar.gz -C /tmp/before
cp .gpu/run16.sh $R/run.sh
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1; lscpu | grep -E "Model name|^CPU\(s\)" >> $R/gpu.txt
python3 -c "
import zipfile,glob
z=zipfile.ZipFile(glob.glob('.gpu/whl/onednn*.whl')[0]); open('/tmp/libdnnl.so.3','wb').write(z.read([n for n in z.namelist() if n.endswith('lib/libdnnl.so.3')][0]))"
export DEVICELAYER_ONEDNN=/tmp/libdnnl.so.3
DEVICELAYER_CACHE=/tmp/dlc-t timeout 170 python3 -m pytest -q -p no:cacheprovider tests/test_attention_forms.py tests/test_attention_pattern.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
tail -3 $R/tests.log
DEVICELAYER_CACHE=/tmp/dlc-f timeout 170 python3 -m benchmarks.attention_forms --device cuda:0 --device opencl:0 --device vulkan:0 --mask --lanes --seconds 0.06 --shape 1x4x128x64 --shape 16x4x128x64 --shape 1x12x128x64 --shape 16x12x128x64 --shape 1x6x1500x64 --shape 4x16x512x64 --shape 2x8x256x128 --out $R/forms > $R/forms.log 2>&1; echo "forms rc=$?" >> $R/rc.txt
cat $R/forms.log | grep -v -i warn
G="--device cuda:0 --device opencl:0 --device vulkan:0 --model bert --model gpt2 --batch 1 --batch 16 --compile none --seconds 0.5"
(cd /tmp/before && DEVICELAYER_CACHE=/tmp/dlc-b PYTHONPATH=/tmp/site:/tmp/before timeout 90 python3 -m benchmarks.gpu_vs_torch $G --out $R/before > $R/before.log 2>&1; echo "before rc=$?" >> $R/rc.txt)
(DEVICELAYER_CACHE=/tmp/dlc-a timeout 90 python3 -m benchmarks.gpu_vs_torch $G --out $R/after > $R/after.log 2>&1; echo "after rc=$?" >> $R/rc.txt)
grep -E "float32: " $R/before.log $R/after.log | cut -c1-300
cat $R/rc.txt
cd $OUT && tar -czf res16.tgz res16 && rm -rf res16

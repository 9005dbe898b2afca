#!/bin/bash
# the final attention code: the exported-SDPA block's device time with the pattern and without (per GPU device), the
# attention, pattern and op tests on the GPU devices
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res17; mkdir -p $R
cp .gpu/run17.sh .gpu/probe_attn2.py $R/
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
DEVICELAYER_CACHE=/tmp/dlc-p timeout 150 python3 .gpu/probe_attn2.py cuda:0 opencl:0 vulkan:0 > $R/probe.log 2>&1; echo "probe rc=$?" >> $R/rc.txt
grep -v -i warn $R/probe.log | cut -c1-110
DEVICELAYER_TEST_DEVICES=cuda:0,opencl:0,vulkan:0 DEVICELAYER_CACHE=/tmp/dlc-t timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_attention_forms.py tests/test_attention_pattern.py tests/test_ops.py -k "attention or Attention or forms" > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
tail -3 $R/tests.log
cat $R/rc.txt
cd $OUT && tar -czf res17.tgz res17 && rm -rf res17

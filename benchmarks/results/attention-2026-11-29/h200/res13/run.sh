#!/bin/bash
# the final tree's Vulkan wait (polls 2 ms before blocking on GPUs): the Vulkan tests and the attention pattern's on
# NVIDIA's Vulkan, and a wait-probe process on the exported BERT
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res13; mkdir -p $R
cp .gpu/run13.sh $R/run.sh
DEVICELAYER_CACHE=/tmp/dlc-t timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_vulkan.py tests/test_attention_pattern.py -k "vulkan or vdev" > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
tail -2 $R/tests.log
[ -f /tmp/tfm/bert.onnx ] || timeout 60 python3 -m benchmarks.attention_pattern --models-dir /tmp/tfm --export-only --family bert > $R/export.log 2>&1
DEVICELAYER_CACHE=/tmp/dlc-v timeout 50 python3 .gpu/probe_vkstall.py /tmp/tfm/bert.onnx 5 > $R/probe.log 2>&1; echo "probe rc=$?" >> $R/rc.txt
grep -v -i warn $R/probe.log; cat $R/rc.txt
cd $OUT && tar -czf res13.tgz res13 && rm -rf res13

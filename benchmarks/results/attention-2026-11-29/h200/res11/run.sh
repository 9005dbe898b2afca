#!/bin/bash
# NVIDIA Vulkan's ~11 ms runs: three processes each running an exported BERT and DistilBERT plan on vulkan:0 for a
# while, timing the waits and submissions (probe_vkstall.py); the attention pattern benchmark's export first
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res11; mkdir -p $R
cp .gpu/run11.sh $R/run.sh; cp .gpu/probe_vkstall.py $R/
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
timeout 120 python3 -m benchmarks.attention_pattern --models-dir /tmp/tfm --export-only --family bert --family distilbert > $R/export.log 2>&1
for p in 1 2 3; do for f in bert distilbert; do
  DEVICELAYER_CACHE=/tmp/dlc-v timeout 60 python3 .gpu/probe_vkstall.py /tmp/tfm/$f.onnx 20 >> $R/probe.log 2>&1
done; done
grep -v -i warn $R/probe.log
cd $OUT && tar -czf res11.tgz res11 && rm -rf res11

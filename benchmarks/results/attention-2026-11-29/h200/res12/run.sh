#!/bin/bash
# NVIDIA Vulkan's ~11 ms runs, a wait that polls first against a blocking one in each process: two processes each running an exported BERT and DistilBERT plan on vulkan:0 for a
# while, timing the waits and submissions (probe_vkstall.py); the attention pattern benchmark's export first
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res12; mkdir -p $R
cp .gpu/run12.sh $R/run.sh; cp .gpu/probe_vkstall.py $R/
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
timeout 120 python3 -m benchmarks.attention_pattern --models-dir /tmp/tfm --export-only --family bert --family distilbert > $R/export.log 2>&1
for p in 1 2; do for f in bert distilbert; do
  DEVICELAYER_CACHE=/tmp/dlc-v timeout 75 python3 .gpu/probe_vkstall.py /tmp/tfm/$f.onnx 7 >> $R/probe.log 2>&1
done; done
grep -v -i warn $R/probe.log
cd $OUT && tar -czf res12.tgz res12 && rm -rf res12

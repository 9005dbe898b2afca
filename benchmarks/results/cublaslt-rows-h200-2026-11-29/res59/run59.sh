#!/bin/bash
# transformers at batch 16 on CUDA: devicelayer's recorded items and run phases against torch.compile's kernels
source .gpu/enter.sh
R=/tmp/res59; mkdir -p $R; cp .gpu/run59.sh .gpu/probe_b16.py $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res59.tgz -C /tmp res59; }
for c in "gpt2 float32" "bert float32" "gpt2 float16"; do
  set -- $c
  timeout 150 python3 .gpu/probe_b16.py $1 $2 $R > $R/b16-$1-$2.log 2>&1; echo "$c rc=$?" >> $R/rc.txt; pk
done
timeout 40 python3 .gpu/probe_lane.py $R/gpt2-float32-b16.onnx cuda:0 3 > $R/lane-gpt2.log 2>&1; echo "lane rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; grep -v Warn $R/b16-gpt2-float32.log | head -80; cat $R/lane-gpt2.log

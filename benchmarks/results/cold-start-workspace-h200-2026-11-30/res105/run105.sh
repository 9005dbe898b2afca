#!/bin/bash
# cold start, before (9ba9605 files shipped in .gpu/before105) / after (0d116f2), interleaved twice; bfloat16 CNNs against torch.compile
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res105; mkdir -p $R; cp .gpu/run105.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res105.tgz -C /tmp res105; }
true
FILES="backends/cuda/dnn.py backends/cuda/conv.py devicelayer/onnx/loader.py devicelayer/onnx/rawdata.py devicelayer/onnx/model.py"
mkdir -p /tmp/after /tmp/before /tmp/models
for f in $FILES; do mkdir -p /tmp/after/$(dirname $f) /tmp/before/$(dirname $f); cp $f /tmp/after/$f; cp .gpu/before105/$f /tmp/before/$f; done
use() { for f in $FILES; do cp /tmp/$1/$f $f; done; }
for round in 1 2; do for v in after before; do use $v
timeout 120 python3 -m benchmarks.cold_start --models-dir /tmp/models --model resnet50 --model efficientnet_b0 --repeat 3 --out $R/cold-$v-$round > $R/cold-$v-$round.log 2>&1; echo "cold $v $round rc=$?" >> $R/rc.txt; pk
done; done
use after
timeout 170 python3 -m benchmarks.gpu_vs_torch --model efficientnet_b0 --model mobilenet_v2 --model convnext_tiny --batch 1 --batch 16 --dtype bfloat16 --compile reduce-overhead --seconds 0.4 --out $R/bf16cnn > $R/bf16cnn.log 2>&1; echo "bf16cnn rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; for round in 1 2; do for v in after before; do echo "== $v $round"; grep -E "warm.*first result" $R/cold-$v-$round.log | cut -c1-150; done; done
grep -E "bfloat16 b" $R/bf16cnn.log | cut -c1-250

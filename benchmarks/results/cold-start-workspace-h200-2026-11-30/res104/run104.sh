#!/bin/bash
# cold start, before (9ba9605) / after (0d116f2: stored cuDNN scratch sizes, stripped protobuf parse), interleaved twice in one session; rawdata tests
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res104; mkdir -p $R; cp .gpu/run104.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res104.tgz -C /tmp res104; }
timeout 100 python3 -m pytest -q tests/test_onnx_rawdata.py tests/test_onnx_loader*.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
FILES="backends/cuda/dnn.py backends/cuda/conv.py devicelayer/onnx/loader.py devicelayer/onnx/rawdata.py devicelayer/onnx/model.py"
mkdir -p /tmp/after /tmp/before /tmp/models
for f in $FILES; do mkdir -p /tmp/after/$(dirname $f) /tmp/before/$(dirname $f); cp $f /tmp/after/$f; git show 9ba9605:$f > /tmp/before/$f; done
use() { for f in $FILES; do cp /tmp/$1/$f $f; done; }
for round in 1 2; do for v in after before; do use $v
timeout 120 python3 -m benchmarks.cold_start --models-dir /tmp/models --model resnet50 --model efficientnet_b0 --repeat 3 --out $R/cold-$v-$round > $R/cold-$v-$round.log 2>&1; echo "cold $v $round rc=$?" >> $R/rc.txt; pk
done; done
use after
cat $R/rc.txt; tail -1 $R/tests.log; for round in 1 2; do for v in after before; do echo "== $v $round"; grep -E "warm" $R/cold-$v-$round.log | cut -c1-170; done; done

#!/bin/bash
# the final rule (1x1 layers at 128 x 128 tiles keep 32-deep slices): tests on vulkan:0, cuda:0, opencl:0; ResNet-50, EfficientNet-B0, BERT, GPT-2 float16 b16 on vulkan:0, this tree and the session's starting tree
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res121; mkdir -p $R; cp .gpu/run121.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt; git diff > $R/tree.diff
pk() { tar -czf $OUT/res121.tgz -C /tmp res121; }
git worktree add --detach /tmp/before HEAD > /dev/null 2>&1; echo "before: $(cd /tmp/before && git log --oneline -1)" >> $R/tree.txt
DEVICELAYER_TEST_DEVICES=vulkan:0,cuda:0,opencl:0 DEVICELAYER_CACHE=/tmp/dlc-t timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_matrix_units.py tests/test_tiled_pipelines.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
G="--device vulkan:0 --batch 16 --dtype float16 --compile none --seconds 1"
DEVICELAYER_CACHE=/tmp/dlc-a3 timeout 130 python3 -m benchmarks.gpu_vs_torch $G --model resnet50 --model efficientnet_b0 --model bert --model gpt2 --out $R/after3 > $R/after3.log 2>&1; echo "after3 rc=$?" >> $R/rc.txt; pk
(cd /tmp/before && DEVICELAYER_CACHE=/tmp/dlc-b3 PYTHONPATH=/tmp/site:/tmp/before timeout 130 python3 -m benchmarks.gpu_vs_torch $G --model resnet50 --model efficientnet_b0 --model bert --model gpt2 --out $R/before3 > $R/before3.log 2>&1); echo "before3 rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; tail -3 $R/tests.log; grep -E "^FAILED" $R/tests.log | head; for f in after3 before3; do echo "== $f"; grep -E " b16 " $R/$f.log | cut -c1-120; done

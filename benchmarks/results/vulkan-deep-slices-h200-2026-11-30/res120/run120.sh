#!/bin/bash
# 64-deep slices and word staging in the MMA form: tests on vulkan:0; ResNet-50, EfficientNet-B0, BERT in float16 at batch 16 on vulkan:0, the session's starting tree (f5aa613) against this one, alternating processes
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res120; mkdir -p $R; cp .gpu/run120.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt; git diff > $R/tree.diff
pk() { tar -czf $OUT/res120.tgz -C /tmp res120; }
git worktree add --detach /tmp/before HEAD > /dev/null 2>&1; echo "before: $(cd /tmp/before && git log --oneline -1)" >> $R/tree.txt
DEVICELAYER_TEST_DEVICES=vulkan:0 DEVICELAYER_CACHE=/tmp/dlc-t timeout 140 python3 -m pytest -q -p no:cacheprovider tests/test_matrix_units.py tests/test_tiled_pipelines.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
G="--device vulkan:0 --model resnet50 --model efficientnet_b0 --model bert --batch 16 --dtype float16 --compile none --seconds 1"
for i in 1 2; do
  (cd /tmp/before && DEVICELAYER_CACHE=/tmp/dlc-b$i PYTHONPATH=/tmp/site:/tmp/before timeout 105 python3 -m benchmarks.gpu_vs_torch $G --out $R/before$i > $R/before$i.log 2>&1); echo "before$i rc=$?" >> $R/rc.txt; pk
  DEVICELAYER_CACHE=/tmp/dlc-a$i timeout 105 python3 -m benchmarks.gpu_vs_torch $G --out $R/after$i > $R/after$i.log 2>&1; echo "after$i rc=$?" >> $R/rc.txt; pk
done
cat $R/rc.txt; tail -3 $R/tests.log; for f in before1 after1 before2 after2; do echo "== $f"; grep -E " b16 " $R/$f.log | cut -c1-200; done

#!/bin/bash
# attention tests after the reference fix; where YOLOv8n float16 b1's and ResNet-50 float32 b16's time outside the graph goes (cProfile)
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res110; mkdir -p $R; cp .gpu/run110.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res110.tgz -C /tmp res110; }
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 120 python3 -m pytest -q tests/test_cuda_attention.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
timeout 100 python3 -m benchmarks.cuda_item_times --arch yolov8n --dtype float16 --batch 1 --top 3 --profile > $R/yolo.log 2>&1; echo "yolo rc=$?" >> $R/rc.txt; pk
timeout 100 python3 -m benchmarks.cuda_item_times --arch resnet50 --dtype float32 --batch 16 --top 3 --profile > $R/r50.log 2>&1; echo "r50 rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; tail -3 $R/tests.log; for f in yolo r50; do grep -E "items, sum|run_numpy" $R/$f.log; grep -A 32 "Ordered by" $R/$f.log | cut -c1-150; done

#!/bin/bash
# slices cutting a tensor into pieces as one split: the fusion tests on cuda:0; YOLOv8n b1 against torch.compile (kernel counts)
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res116; mkdir -p $R; cp .gpu/run116.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res116.tgz -C /tmp res116; }
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 60 python3 -m pytest -q tests/test_fusion.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
timeout 150 python3 -m benchmarks.gpu_vs_torch --model yolov8n --batch 1 --dtype float16 --dtype float32 --compile reduce-overhead --seconds 0.5 --out $R/peers > $R/peers.log 2>&1; echo "peers rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; tail -2 $R/tests.log; grep -E " b[0-9]+ " $R/peers.log | cut -c1-300

#!/bin/bash
# pinned inputs uploaded without staging: the replay tests on cuda:0; YOLOv8n float16 b1 run_numpy with lending on and off after the copy split
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res115; mkdir -p $R; cp .gpu/run115.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res115.tgz -C /tmp res115; }
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 100 python3 -m pytest -q tests/test_replay_staging.py tests/test_lane.py tests/test_hostcopy.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
timeout 100 python3 .gpu/probe_lend.py yolov8n float16 1 > $R/lend16.txt 2>&1; echo "lend16 rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; tail -3 $R/tests.log; grep -v Warn $R/lend16.txt | tail -3

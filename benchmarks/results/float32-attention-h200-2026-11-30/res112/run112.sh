#!/bin/bash
# outputs lent in pinned arrays: replay tests on cuda:0, run_numpy with and without lending (YOLOv8n float16 b1, float32 b1), YOLOv8n and Whisper against torch.compile
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res112; mkdir -p $R; cp .gpu/run112.sh .gpu/probe_lend.py $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res112.tgz -C /tmp res112; }
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 150 python3 -m pytest -q tests/test_replay_staging.py tests/test_lane.py tests/test_recording.py tests/test_cuda_start.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
timeout 100 python3 .gpu/probe_lend.py yolov8n float16 1 > $R/lend16.txt 2>&1; echo "lend16 rc=$?" >> $R/rc.txt; pk
timeout 100 python3 .gpu/probe_lend.py yolov8n float32 1 > $R/lend32.txt 2>&1; echo "lend32 rc=$?" >> $R/rc.txt; pk
timeout 150 python3 -m benchmarks.gpu_vs_torch --model yolov8n --batch 1 --dtype float16 --dtype float32 --compile reduce-overhead --seconds 0.5 --out $R/peers > $R/peers.log 2>&1; echo "peers rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; tail -3 $R/tests.log; grep -v Warn $R/lend16.txt | tail -3; grep -v Warn $R/lend32.txt | tail -3; grep -E " b[0-9]+ " $R/peers.log | cut -c1-300

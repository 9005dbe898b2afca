#!/bin/bash
# where the time outside the graph goes for YOLOv8n float16 b1 and ResNet-50 float32 b16 (large inputs and outputs); what pieces would save
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res111; mkdir -p $R; cp .gpu/run111.sh .gpu/probe_io.py $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res111.tgz -C /tmp res111; }
timeout 90 python3 .gpu/probe_io.py yolov8n float16 1 > $R/yolo.txt 2>&1; echo "yolo rc=$?" >> $R/rc.txt; pk
timeout 90 python3 .gpu/probe_io.py resnet50 float32 16 > $R/r50.txt 2>&1; echo "r50 rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; cat $R/yolo.txt | grep -v Warning | tail -14; cat $R/r50.txt | grep -v Warning | tail -14

#!/bin/bash
# Whisper's encoder float32 b16: devicelayer's items against PyTorch eager's kernels; the CRNN's host calls on 16 cores; YOLOv8n against torch.compile
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res108; mkdir -p $R; cp .gpu/run108.sh .gpu/probe_torch_kernels.py $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res108.tgz -C /tmp res108; }
timeout 120 python3 -m benchmarks.cuda_item_times --arch whisper_encoder --dtype float32 --batch 16 --top 40 --out $R/items > $R/items.log 2>&1; echo "items rc=$?" >> $R/rc.txt; pk
timeout 60 python3 .gpu/probe_torch_kernels.py whisper_encoder 16 float32 > $R/torch_kernels.log 2>&1; echo "torchk rc=$?" >> $R/rc.txt; pk
gunzip -c .gpu/onednn/libdnnl.so.3.gz > /tmp/libdnnl.so.3
mkdir -p /tmp/models; timeout 60 python3 -m benchmarks.arch_models --models-dir /tmp/models --model crnn > $R/export.log 2>&1
(export DEVICELAYER_ONEDNN=/tmp/libdnnl.so.3
timeout 60 python3 -m benchmarks.host_overhead ops /tmp/models/crnn.onnx --out $R/ops > $R/ops.log 2>&1; echo "ops rc=$?" >> $R/rc.txt
timeout 60 python3 -m benchmarks.host_overhead ops /tmp/models/crnn.onnx --threads 4 --out $R/ops4 > $R/ops4.log 2>&1; echo "ops4 rc=$?" >> $R/rc.txt); pk
timeout 200 python3 -m benchmarks.gpu_vs_torch --model yolov8n --batch 1 --batch 16 --dtype float32 --dtype float16 --compile reduce-overhead --seconds 0.4 --out $R/yolo > $R/yolo.log 2>&1; echo "yolo rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; head -60 $R/items.log | cut -c1-160; head -45 $R/torch_kernels.log | cut -c1-200; tail -12 $R/ops.log; tail -12 $R/ops4.log; grep -E " b[0-9]+ " $R/yolo.log | cut -c1-300

#!/bin/bash
# float32 attention on tensor cores (three TF32 products): its tests, Whisper's encoder's items, the float32 transformers against torch.compile; YOLOv8n float16 b1's items
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res109; mkdir -p $R; cp .gpu/run109.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res109.tgz -C /tmp res109; }
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 120 python3 -m pytest -q -x tests/test_cuda_attention.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
timeout 80 python3 -m benchmarks.cuda_item_times --arch whisper_encoder --dtype float32 --batch 16 --top 12 --out $R/items > $R/items.log 2>&1; echo "items rc=$?" >> $R/rc.txt; pk
timeout 260 python3 -m benchmarks.gpu_vs_torch --model whisper_encoder --model gpt2 --model bert --batch 1 --batch 16 --dtype float32 --compile reduce-overhead --seconds 0.4 --out $R/peers > $R/peers.log 2>&1; echo "peers rc=$?" >> $R/rc.txt; pk
timeout 80 python3 -m benchmarks.cuda_item_times --arch yolov8n --dtype float16 --batch 1 --top 30 --out $R/yolo > $R/yolo.log 2>&1; echo "yolo rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; tail -5 $R/tests.log; head -22 $R/items.log | cut -c1-150; grep -E " b[0-9]+ " $R/peers.log | cut -c1-300; head -14 $R/yolo.log | cut -c1-150

#!/bin/bash
# CUDA vendor-path tests and bfloat16 op cases at the review commit; the CRNN's LSTM as two directions on the OpenMP team (16 cores); Whisper's encoder and YOLOv8n against torch.compile
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res107; mkdir -p $R; cp .gpu/run107.sh .gpu/probe_lstm_team.py $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res107.tgz -C /tmp res107; }
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 230 python3 -m pytest -q tests/test_cuda_attention.py tests/test_cuda_layernorm.py tests/test_cuda_depthwise.py tests/test_cuda_conv.py tests/test_cuda_gemm.py tests/test_cuda_pool.py tests/test_cuda_start.py "tests/test_ops.py" -k "cuda or bf16 or bfloat16" > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
gunzip -c .gpu/onednn/libdnnl.so.3.gz > /tmp/libdnnl.so.3
mkdir -p /tmp/models
(export DEVICELAYER_ONEDNN=/tmp/libdnnl.so.3; timeout 30 python3 .gpu/probe_lstm_team.py > $R/lstm_team.txt 2>&1; echo "lstm rc=$?" >> $R/rc.txt
timeout 90 python3 -m benchmarks.host_vs_onnxruntime --models-dir /tmp/models --model crnn --model ocr_classifier --rounds 4 --block 0.2 --out $R/host > $R/host.log 2>&1; echo "host rc=$?" >> $R/rc.txt); pk
timeout 240 python3 -m benchmarks.gpu_vs_torch --model whisper_encoder --model yolov8n --batch 1 --batch 16 --dtype float32 --dtype float16 --compile reduce-overhead --seconds 0.4 --out $R/peers > $R/peers.log 2>&1; echo "peers rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; tail -3 $R/tests.log; cat $R/lstm_team.txt | tail -6; grep -E "ratio|crnn|ocr" $R/host.log | cut -c1-120; grep -E " b[0-9]+ " $R/peers.log | cut -c1-300

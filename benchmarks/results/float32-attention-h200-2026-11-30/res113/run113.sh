#!/bin/bash
# after float32 attention and lent outputs: GPT-2 and BERT-mini against torch.compile (float32, float16, b1, b16); the CRNN and OCR classifier on the host's 16 cores with no PyTorch in the process
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res113; mkdir -p $R; cp .gpu/run113.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res113.tgz -C /tmp res113; }
mkdir -p /tmp/models; timeout 60 python3 -m benchmarks.arch_models --models-dir /tmp/models --model crnn --model ocr_classifier > $R/export.log 2>&1
gunzip -c .gpu/onednn/libdnnl.so.3.gz > /tmp/libdnnl.so.3
(export DEVICELAYER_ONEDNN=/tmp/libdnnl.so.3; timeout 80 python3 -m benchmarks.host_vs_onnxruntime --models-dir /tmp/models --model crnn --model ocr_classifier --rounds 6 --block 0.2 --out $R/host > $R/host.log 2>&1; echo "host rc=$?" >> $R/rc.txt); pk
timeout 300 python3 -m benchmarks.gpu_vs_torch --model gpt2 --model bert --batch 1 --batch 16 --dtype float32 --dtype float16 --compile reduce-overhead --seconds 0.4 --out $R/peers > $R/peers.log 2>&1; echo "peers rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; grep -E "crnn|ocr_cl|geometric" $R/host.log | cut -c1-120; grep -E " b[0-9]+ " $R/peers.log | cut -c1-300

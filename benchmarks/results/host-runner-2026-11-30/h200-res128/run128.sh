#!/bin/bash
# the host runner on 16 cores: its tests with oneDNN, then 18 models against onnxruntime (exported in a process of their own; no PyTorch in the measuring one)
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res128; mkdir -p $R; cp .gpu/run128.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res128.tgz -C /tmp res128; }
(which cc gcc clang; cc --version) > $R/cc.txt 2>&1
gunzip -c .gpu/onednn/libdnnl.so.3.gz > /tmp/libdnnl.so.3; export DEVICELAYER_ONEDNN=/tmp/libdnnl.so.3
timeout 100 python3 -m pytest -q tests/test_host_runner.py tests/test_host_stretch.py tests/test_host_onednn_rnn.py tests/test_host_onednn.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
python3 -m devicelayer.cli info > $R/info.txt 2>&1
mkdir -p /tmp/models; timeout 150 python3 -m benchmarks.arch_models --models-dir /tmp/models --model resnet18 --model squeezenet --model densenet121 --model regnet_y_400mf --model shufflenet_v2 --model googlenet --model inception_v3 --model mobilenet_v2 --model efficientnet_b0 --model convnext_tiny --model whisper_encoder --model bert --model gpt2 --model whisper_encoder_64 --model bert_64 --model ocr_classifier --model crnn --model yolov8n > $R/export.log 2>&1; echo "export rc=$?" >> $R/rc.txt; ls /tmp/models >> $R/export.log; pk
timeout 290 python3 -m benchmarks.host_vs_onnxruntime --models-dir /tmp/models --model resnet18 --model squeezenet --model densenet121 --model regnet_y_400mf --model shufflenet_v2 --model googlenet --model inception_v3 --model mobilenet_v2 --model efficientnet_b0 --model convnext_tiny --model whisper_encoder --model bert --model gpt2 --model whisper_encoder_64 --model bert_64 --model ocr_classifier --model crnn --model yolov8n --rounds 3 --block 0.2 --out $R/host > $R/host.log 2>&1; echo "host rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt $R/cc.txt | head -8; tail -2 $R/tests.log; grep -A1 host_runner $R/info.txt | head -4; grep -E "│" $R/host.log | cut -c1-120

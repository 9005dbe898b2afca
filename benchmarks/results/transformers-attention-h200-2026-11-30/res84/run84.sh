#!/bin/bash
# EfficientNet-B0 float16 (SE gates in one kernel) vs torch.compile; cold start on CUDA; the host (oneDNN) against onnxruntime on 16 cores
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res84; mkdir -p $R; cp .gpu/run84.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res84.tgz -C /tmp res84; }
timeout 100 python3 -m benchmarks.gpu_vs_torch --model efficientnet_b0 --batch 1 --batch 16 --dtype float16 --compile reduce-overhead --seconds 0.4 --out $R/cnn16 > $R/cnn16.log 2>&1; echo "cnn16 rc=$?" >> $R/rc.txt; pk
mkdir -p /tmp/models
timeout 110 python3 -m benchmarks.cold_start --models-dir /tmp/models --model resnet50 --model efficientnet_b0 --repeat 2 --out $R/cold > $R/cold.log 2>&1; echo "cold rc=$?" >> $R/rc.txt; pk
gunzip -c .gpu/onednn/libdnnl.so.3.gz > /tmp/libdnnl.so.3; export DEVICELAYER_ONEDNN=/tmp/libdnnl.so.3
python3 -c "import sys; from devicelayer.cli import main; sys.exit(main(['info', '--json']))" > $R/info.json 2>$R/info.err; echo "info rc=$?" >> $R/rc.txt
timeout 250 python3 -m benchmarks.host_vs_onnxruntime --models-dir /tmp/models --rounds 2 --block 0.2 --out $R/host > $R/host.log 2>&1; echo "host rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; grep -h " float" $R/cnn16.log | cut -c1-200; tail -25 $R/cold.log | cut -c1-160; grep -E "ratio|error|Error" $R/host.log | cut -c1-160 | head -30; tail -26 $R/host.log | cut -c1-140

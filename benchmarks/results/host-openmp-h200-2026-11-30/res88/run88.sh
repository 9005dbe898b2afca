#!/bin/bash
# the host on 16 cores: per-call times in order (team form, alone form, faster per call) against onnxruntime's profile; the CUDA attention tests
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res88; mkdir -p $R; cp .gpu/run88.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res88.tgz -C /tmp res88; }
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 150 python3 -m pytest -q -x tests/test_cuda_attention.py > $R/attn.log 2>&1; echo "attn rc=$?" >> $R/rc.txt; pk
gunzip -c .gpu/onednn/libdnnl.so.3.gz > /tmp/libdnnl.so.3; export DEVICELAYER_ONEDNN=/tmp/libdnnl.so.3
mkdir -p /tmp/models
M="shufflenet_v2 mobilenet_v2 squeezenet googlenet bert efficientnet_b0 gpt2 densenet121"
A=""; for m in $M; do A="$A --model $m"; done
timeout 200 python3 -m benchmarks.host_vs_onnxruntime --models-dir /tmp/models $A --rounds 2 --block 0.2 --out $R/host > $R/host.log 2>&1; echo "host rc=$?" >> $R/rc.txt; pk
for m in $M; do
timeout 40 python3 -m benchmarks.host_overhead ops /tmp/models/$m.onnx --reps 40 --out $R/ops > $R/ops-$m.log 2>&1; echo "ops $m rc=$?" >> $R/rc.txt; pk
done
for t in 4 8; do for m in shufflenet_v2 mobilenet_v2; do
timeout 40 python3 -m benchmarks.host_overhead ops /tmp/models/$m.onnx --reps 40 --threads $t --out $R/ops > $R/ops-$m-$t.log 2>&1; echo "ops $m $t rc=$?" >> $R/rc.txt; pk
done; done
cat $R/rc.txt; tail -3 $R/attn.log; tail -12 $R/host.log | cut -c1-140; for f in $R/ops-*.log; do head -1 $f | cut -c1-250; done

#!/bin/bash
# the host on 16 cores against onnxruntime: does the peer's spinning pool (or the pause) decide the ratio? cold start profile on CUDA
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res89; mkdir -p $R; cp .gpu/run89.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res89.tgz -C /tmp res89; }
mkdir -p /tmp/models
timeout 120 python3 -m benchmarks.cold_start --models-dir /tmp/models --model resnet50 --repeat 2 --profile --out $R/cold > $R/cold.log 2>&1; echo "cold rc=$?" >> $R/rc.txt; pk
gunzip -c .gpu/onednn/libdnnl.so.3.gz > /tmp/libdnnl.so.3; export DEVICELAYER_ONEDNN=/tmp/libdnnl.so.3
A=""; for m in mobilenet_v2 squeezenet shufflenet_v2 bert googlenet efficientnet_b0; do A="$A --model $m"; done
H="python3 -m benchmarks.host_vs_onnxruntime --models-dir /tmp/models $A --rounds 3 --block 0.2"
timeout 150 $H --out $R/default > $R/default.log 2>&1; echo "default rc=$?" >> $R/rc.txt; pk
timeout 150 $H --pause 0.5 --out $R/pause > $R/pause.log 2>&1; echo "pause rc=$?" >> $R/rc.txt; pk
timeout 150 $H --ort-config session.intra_op.allow_spinning=0 --out $R/nospin > $R/nospin.log 2>&1; echo "nospin rc=$?" >> $R/rc.txt; pk
DEVICELAYER_PIN_THREADS=0 timeout 150 $H --out $R/unbound > $R/unbound.log 2>&1; echo "unbound rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; tail -4 $R/cold.log | cut -c1-200; for v in default pause nospin unbound; do echo "== $v"; grep -E "ratio" $R/$v.log | cut -c1-120; done

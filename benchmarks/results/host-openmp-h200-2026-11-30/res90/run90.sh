#!/bin/bash
# the host (oneDNN, bound threads) against onnxruntime on 16 cores, all 18 models, 0.5 s between blocks; then the small six unbound
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res90; mkdir -p $R; cp .gpu/run90.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res90.tgz -C /tmp res90; }
gunzip -c .gpu/onednn/libdnnl.so.3.gz > /tmp/libdnnl.so.3; export DEVICELAYER_ONEDNN=/tmp/libdnnl.so.3
mkdir -p /tmp/models
timeout 470 python3 -m benchmarks.host_vs_onnxruntime --models-dir /tmp/models --rounds 3 --block 0.2 --out $R/all > $R/all.log 2>&1; echo "all rc=$?" >> $R/rc.txt; pk
A=""; for m in mobilenet_v2 squeezenet shufflenet_v2 bert googlenet efficientnet_b0; do A="$A --model $m"; done
DEVICELAYER_PIN_THREADS=0 timeout 90 python3 -m benchmarks.host_vs_onnxruntime --models-dir /tmp/models $A --rounds 3 --block 0.2 --out $R/unbound > $R/unbound.log 2>&1; echo "unbound rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; grep -E "ratio" $R/all.log | cut -c1-120; tail -24 $R/all.log | cut -c1-120; echo "== unbound"; grep -E "ratio" $R/unbound.log | cut -c1-120

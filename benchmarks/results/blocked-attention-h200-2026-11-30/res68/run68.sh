#!/bin/bash
# blocked attention with its loads in flight: replayed-graph GPU time (nodes / rule / forced tilings); transformers vs torch.compile, before (c9d9489) and after; attention tests on cuda:0; cold start
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res68; mkdir -p $R /tmp/before /tmp/models; cp .gpu/run68.sh .gpu/probe_att.py $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
tar -xzf .gpu/before-c9d.tar.gz -C /tmp/before
pk() { tar -czf $OUT/res68.tgz -C /tmp res68; }
timeout 110 python3 .gpu/probe_att.py gpt2,bert float32,float16 > $R/probe.log 2>&1; echo "probe rc=$?" >> $R/rc.txt; pk
timeout 160 python3 -m benchmarks.gpu_vs_torch --model gpt2 --model bert --batch 1 --batch 16 --dtype float32 --dtype float16 --compile reduce-overhead --seconds 1.0 --out $R/vs-after > $R/vs-after.log 2>&1; echo "vs after rc=$?" >> $R/rc.txt; pk
(cd /tmp/before && timeout 160 python3 -m benchmarks.gpu_vs_torch --model gpt2 --model bert --batch 1 --batch 16 --dtype float32 --dtype float16 --compile reduce-overhead --seconds 1.0 --out $R/vs-before > $R/vs-before.log 2>&1; echo "vs before rc=$?" >> $R/rc.txt); pk
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 70 python3 -m pytest -q -p no:cacheprovider tests/test_attention_forms.py tests/test_attention_pattern.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; grep -E "passed|failed" $R/tests.log | tail -2; grep -E "^FAILED" $R/tests.log | head; grep -v Warning $R/probe.log | cut -c1-160; grep " float" $R/vs-*.log | cut -c1-120

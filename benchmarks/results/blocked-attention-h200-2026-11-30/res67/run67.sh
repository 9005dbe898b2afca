#!/bin/bash
# attention tests on the NVIDIA devices; GPT-2/BERT replayed-graph GPU time with attention as nodes vs the blocked kernel's tilings
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res67; mkdir -p $R; cp .gpu/run67.sh .gpu/probe_att.py $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res67.tgz -C /tmp res67; }
timeout 290 python3 .gpu/probe_att.py gpt2,bert float32,float16 > $R/probe.log 2>&1; echo "probe rc=$?" >> $R/rc.txt; pk
DEVICELAYER_TEST_DEVICES=cuda:0,opencl:0,vulkan:0,host timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_attention_forms.py tests/test_attention_pattern.py tests/test_host_onednn_attention.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; grep -E "passed|failed" $R/tests.log | tail -2; grep -E "^FAILED" $R/tests.log | head -20; grep -v Warning $R/probe.log | cut -c1-200 | tail -60

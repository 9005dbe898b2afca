#!/bin/bash
# NVIDIA's OpenCL with whole buffers: the graph, recording, replay and fusion tests on opencl:0
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res98; mkdir -p $R; cp .gpu/run98.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res98.tgz -C /tmp res98; }
DEVICELAYER_BACKENDS=opencl,host DEVICELAYER_TEST_DEVICES=opencl:0,opencl:1,host timeout 170 python3 -m pytest -q -x tests/test_graph.py tests/test_recording.py tests/test_replay_staging.py tests/test_fusion.py tests/test_whole_buffers.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; tail -5 $R/tests.log

#!/bin/bash
# the CUDA test files and the replay tests on cuda:0 at the lent-outputs commit; host copies into pinned memory split over 1-4 threads
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res114; mkdir -p $R; cp .gpu/run114.sh .gpu/probe_copy.py $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res114.tgz -C /tmp res114; }
timeout 60 python3 .gpu/probe_copy.py > $R/copy.txt 2>&1; echo "copy rc=$?" >> $R/rc.txt; pk
DEVICELAYER_TEST_DEVICES=cuda:0 timeout 330 python3 -m pytest -q tests/test_cuda_attention.py tests/test_cuda_layernorm.py tests/test_cuda_depthwise.py tests/test_cuda_conv.py tests/test_cuda_gemm.py tests/test_cuda_pool.py tests/test_cuda_start.py tests/test_replay_staging.py tests/test_lane.py tests/test_recording.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; cat $R/copy.txt; tail -3 $R/tests.log

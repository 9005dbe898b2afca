#!/bin/bash
# GELU (tanh form) in cuBLASLt's epilogue, tuning guarded: the product and epilogue tests on the GPU devices
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res63; mkdir -p $R; cp .gpu/run63.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res63.tgz -C /tmp res63; }
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_gemm.py tests/test_epilogue.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; grep -E "passed|failed" $R/tests.log | tail -2; grep -E "^FAILED" $R/tests.log | head; grep -E "^E " $R/tests.log | head -20

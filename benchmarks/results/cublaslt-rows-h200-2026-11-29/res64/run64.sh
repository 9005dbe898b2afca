#!/bin/bash
# the shared library lookup and scratch helper: products, epilogues and convolutions on the GPU devices
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res64; mkdir -p $R; cp .gpu/run64.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res64.tgz -C /tmp res64; }
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_gemm.py tests/test_cuda_conv.py tests/test_cuda_start.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
python3 -m devicelayer.cli info 2>&1 | grep -i "cuBLAS" | head -3 > $R/info.txt; pk
cat $R/rc.txt; grep -E "passed|failed" $R/tests.log | tail -2; grep -E "^FAILED" $R/tests.log | head; grep -E "^E " $R/tests.log | head -10; cat $R/info.txt

#!/bin/bash
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
for m in A B C A B C; do timeout 90 python3 .gpu/stress.py $m 640 opencl:1 >> $OUT/stress.log 2>&1; echo "mode $m rc=$?" >> $OUT/stress.log; done

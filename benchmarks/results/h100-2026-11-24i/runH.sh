#!/bin/bash
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
timeout 60 python3 .gpu/stress.py A 640 opencl:1 >> $OUT/stress.log 2>&1; echo "A rc=$?" >> $OUT/stress.log
timeout 60 python3 .gpu/stress.py D 640 opencl:1 >> $OUT/stress.log 2>&1; echo "D rc=$?" >> $OUT/stress.log
for m in loops cbs; do POCL_WORK_GROUP_METHOD=$m timeout 90 python3 .gpu/stress.py A 640 opencl:1 >> $OUT/stress.log 2>&1; echo "A WG=$m rc=$?" >> $OUT/stress.log; done
POCL_KERNEL_CACHE=0 timeout 90 python3 .gpu/stress.py A 640 opencl:1 >> $OUT/stress.log 2>&1; echo "A nocache rc=$?" >> $OUT/stress.log

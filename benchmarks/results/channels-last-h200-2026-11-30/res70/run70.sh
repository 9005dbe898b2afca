#!/bin/bash
# cuDNN NHWC filters and 1x1 as cuBLASLt products: ResNet-50's layers float16 and float32 b16, float16 b1
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res70; mkdir -p $R; cp .gpu/run70.sh .gpu/probe_nhwc.py $R/; git log --oneline -1 > $R/tree.txt
pk() { tar -czf $OUT/res70.tgz -C /tmp res70; }
timeout 150 python3 .gpu/probe_nhwc.py float16 16 > $R/nhwc-fp16-b16.log 2>&1; echo "fp16 b16 rc=$?" >> $R/rc.txt; pk
timeout 100 python3 .gpu/probe_nhwc.py float16 1 > $R/nhwc-fp16-b1.log 2>&1; echo "fp16 b1 rc=$?" >> $R/rc.txt; pk
timeout 120 python3 .gpu/probe_nhwc.py float32 16 > $R/nhwc-fp32-b16.log 2>&1; echo "fp32 b16 rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; cat $R/nhwc-fp16-b16.log | grep -v Warn; tail -3 $R/nhwc-fp16-b1.log $R/nhwc-fp32-b16.log

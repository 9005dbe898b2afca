#!/bin/bash
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res52; mkdir -p $R; cp .gpu/run52.sh .gpu/probe_stage.py $R/
timeout 90 python3 .gpu/probe_stage.py vulkan:0 opencl:0 cuda:0 > $R/stage.log 2>&1; echo "stage rc=$?" >> $R/rc.txt
grep -v Warn $R/stage.log | grep -v isinstance; cat $R/rc.txt
cd $OUT && tar -czf res52.tgz res52 && rm -rf res52

#!/bin/bash
# NVIDIA's OpenCL: launches on sub-buffers of one parent against separate buffers; EfficientNet-B0's arena against one buffer per tensor
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res96; mkdir -p $R; cp .gpu/run96.sh .gpu/probe_arena.py $R/; git log --oneline -1 > $R/tree.txt
pk() { tar -czf $OUT/res96.tgz -C /tmp res96; }
timeout 150 python3 .gpu/probe_arena.py opencl:0 > $R/probe.log 2>&1; echo "probe rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; grep -v Warning $R/probe.log | cut -c1-200 | tail -12

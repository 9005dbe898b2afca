#!/bin/bash
# what one enqueue costs on NVIDIA's OpenCL: raw PyOpenCL variants, then each recorded launch of EfficientNet-B0
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res95; mkdir -p $R; cp .gpu/run95.sh .gpu/probe_enqueue.py $R/; git log --oneline -1 > $R/tree.txt
pk() { tar -czf $OUT/res95.tgz -C /tmp res95; }
timeout 150 python3 .gpu/probe_enqueue.py > $R/probe.log 2>&1; echo "probe rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; cat $R/probe.log | cut -c1-200 | tail -30

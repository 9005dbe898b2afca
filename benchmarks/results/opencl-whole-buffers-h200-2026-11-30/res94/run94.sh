#!/bin/bash
# where EfficientNet-B0 float32 b1 spends its time on NVIDIA's OpenCL (and Vulkan beside it)
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res94; mkdir -p $R; cp .gpu/run94.sh .gpu/probe_ocl.py $R/; git log --oneline -1 > $R/tree.txt
pk() { tar -czf $OUT/res94.tgz -C /tmp res94; }
timeout 170 python3 .gpu/probe_ocl.py opencl:0 vulkan:0 > $R/probe.log 2>&1; echo "probe rc=$?" >> $R/rc.txt; pk
DEVICELAYER_PROFILE=1 timeout 120 python3 .gpu/probe_ocl.py opencl:0 > $R/probe-profiled.log 2>&1; echo "probe profiled rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; grep -v "^$" $R/probe.log | cut -c1-150 | head -75; echo "== profiled"; grep -v "^$" $R/probe-profiled.log | cut -c1-150 | head -22

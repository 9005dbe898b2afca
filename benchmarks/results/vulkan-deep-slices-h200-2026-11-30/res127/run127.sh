#!/bin/bash
# what NVIDIA's Vulkan driver reports for the MMA forms' pipelines (VK_KHR_pipeline_executable_properties): registers, spills, shared memory
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res127; mkdir -p $R; cp .gpu/run127.sh .gpu/probe_stats.py $R/; git status --short > $R/tree.txt
pk() { tar -czf $OUT/res127.tgz -C /tmp res127; }
cd .gpu && DEVICELAYER_CACHE=/tmp/dlc-s timeout 100 python3 probe_stats.py > $R/stats.log 2>&1; echo "stats rc=$?" >> $R/rc.txt; cd ..; pk
cat $R/rc.txt; cut -c1-600 $R/stats.log | tail -30

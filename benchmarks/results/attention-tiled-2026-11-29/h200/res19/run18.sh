#!/bin/bash
# the exported-SDPA block with the attention pattern and without, inputs on the device, per GPU device
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res19; mkdir -p $R
cp .gpu/run18.sh .gpu/probe_attn3.py $R/
DEVICELAYER_CACHE=/tmp/dlc-p timeout 240 python3 .gpu/probe_attn3.py cuda:0 opencl:0 vulkan:0 > $R/probe.log 2>&1; echo "probe rc=$?" >> $R/rc.txt
grep -v -i warn $R/probe.log
cat $R/rc.txt
cd $OUT && tar -czf res19.tgz res19 && rm -rf res19

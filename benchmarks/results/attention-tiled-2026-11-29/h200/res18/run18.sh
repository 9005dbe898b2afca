#!/bin/bash
# the exported-SDPA block with the attention pattern and without, inputs on the device, per GPU device
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res18; mkdir -p $R
cp .gpu/run18.sh .gpu/probe_attn3.py $R/
DEVICELAYER_CACHE=/tmp/dlc-p timeout 200 python3 .gpu/probe_attn3.py cuda:0 opencl:0 vulkan:0 > $R/probe.log 2>&1; echo "probe rc=$?" >> $R/rc.txt
grep -v -i warn $R/probe.log
cat $R/rc.txt
cd $OUT && tar -czf res18.tgz res18 && rm -rf res18

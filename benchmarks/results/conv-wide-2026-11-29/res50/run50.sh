#!/bin/bash
# transfers on each device against torch; ResNet-50 b16 with host or device-resident input
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res50; mkdir -p $R; cp .gpu/run50.sh .gpu/probe_transfer.py $R/
DEVICELAYER_CACHE=/tmp/dlc-t timeout 150 python3 .gpu/probe_transfer.py vulkan:0 opencl:0 cuda:0 > $R/transfer.log 2>&1; echo "transfer rc=$?" >> $R/rc.txt
grep -v Warn $R/transfer.log | grep -v isinstance; cat $R/rc.txt
cd $OUT && tar -czf res50.tgz res50 && rm -rf res50

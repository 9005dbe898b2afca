#!/bin/bash
# the final tree: transfers (the staged copy split across threads) and ResNet-50 b16 host-in/out vs device-resident;
# ResNet-50 b16 float32 against eager twice per device (tuner on); the GPU tests of the changed code
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res51; mkdir -p $R; cp .gpu/run51.sh .gpu/probe_transfer.py .gpu/model_conv.py $R/
git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
DEVICELAYER_CACHE=/tmp/dlc-t timeout 150 python3 .gpu/probe_transfer.py vulkan:0 opencl:0 cuda:0 > $R/transfer.log 2>&1; echo "transfer rc=$?" >> $R/rc.txt
grep -v Warn $R/transfer.log | grep -v isinstance
for pass in 1 2; do
for d in vulkan:0 opencl:0; do
  DEVICELAYER_CACHE=/tmp/dlc-m-$d-$pass timeout 55 python3 .gpu/model_conv.py --device $d --seconds 2 > $R/model-${d/:/}-$pass.log 2>&1; echo "model $d $pass rc=$?" >> $R/rc.txt
done
done
grep -h '"model"' $R/model-*.log
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_hostcopy.py tests/test_recording.py tests/test_tiled_pipelines.py -k "hostcopy or record or conv or split or wide or pointwise or choice or rule" > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
tail -3 $R/tests.log; cat $R/rc.txt
cd $OUT && tar -czf res51.tgz res51 && rm -rf res51

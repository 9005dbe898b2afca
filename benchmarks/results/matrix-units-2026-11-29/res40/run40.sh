#!/bin/bash
# ResNet-50 and EfficientNet-B0, float16, batch 16, vulkan:0 alone in its process: MMA form and not, twice each
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res40; mkdir -p $R; cp .gpu/run40.sh .gpu/model_mma.py $R/
for i in 1 2; do
  DEVICELAYER_CACHE=/tmp/dlc-m$i timeout 110 python3 .gpu/model_mma.py --seconds 3 > $R/mma-$i.log 2>&1; echo "mma $i rc=$?" >> $R/rc.txt
  DEVICELAYER_CACHE=/tmp/dlc-n$i timeout 110 python3 .gpu/model_mma.py --seconds 3 --no-mma > $R/nomma-$i.log 2>&1; echo "nomma $i rc=$?" >> $R/rc.txt
done
grep -h '"model"' $R/*.log; cat $R/rc.txt
cd $OUT && tar -czf res40.tgz res40 && rm -rf res40

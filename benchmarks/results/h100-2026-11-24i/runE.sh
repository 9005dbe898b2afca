#!/bin/bash
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
export DEVICELAYER_CACHE=/tmp/dlc-e DEVICELAYER_TUNE=0
mkdir -p /tmp/var && tar -xzf .gpu/variants.tar.gz -C /tmp/var
a="--device opencl:0 --device vulkan:0 --model mobilenet_v2 --batch 1 --compile none --seconds 0.3"
for v in B C D E; do
  (cd /tmp/var/$v && PYTHONPATH=/tmp/var/$v timeout 100 python3 -m benchmarks.gpu_vs_torch $a --out /tmp/o$v > $OUT/$v.log 2>&1; echo "$v rc=$?" >> $OUT/rc.txt)
done
a="--device vulkan:0 --model mobilenet_v2 --batch 1 --compile none --seconds 0.3"
timeout 100 python3 -m benchmarks.gpu_vs_torch $a --out /tmp/oV > $OUT/vk.log 2>&1; echo "A vulkan only rc=$?" >> $OUT/rc.txt
a="--device opencl:0 --model mobilenet_v2 --batch 1 --compile none --seconds 0.3"
timeout 100 python3 -m benchmarks.gpu_vs_torch $a --out /tmp/oC > $OUT/cl.log 2>&1; echo "A opencl only rc=$?" >> $OUT/rc.txt

#!/bin/bash
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
mkdir -p $OUT/cold /tmp/models
lscpu | grep -E "Model name|Flags" | cut -c1-300 > $OUT/cpu.txt
for d in cuda:0 opencl:0 vulkan:0; do
  timeout 170 python3 -m benchmarks.cold_start --models-dir /tmp/models --model resnet50 --model efficientnet_b0 --device $d --repeat 2 --out $OUT/cold > $OUT/cold/$(echo $d | tr : _).log 2>&1
  echo "$d rc=$?" >> $OUT/rc.txt
done

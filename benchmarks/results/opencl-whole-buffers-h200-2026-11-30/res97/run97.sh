#!/bin/bash
# NVIDIA's OpenCL with a plan's tensors in whole buffers: tests, then EfficientNet-B0 and ResNet-50 against PyTorch
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res97; mkdir -p $R; cp .gpu/run97.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res97.tgz -C /tmp res97; }
DEVICELAYER_TEST_DEVICES=opencl:0,vulkan:0 timeout 100 python3 -m pytest -q tests/test_whole_buffers.py tests/test_graph.py -k "whole or memory or arena or chain" > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
timeout 240 python3 -m benchmarks.gpu_vs_torch --device opencl:0 --model efficientnet_b0 --model resnet50 --batch 1 --batch 16 --seconds 0.4 --out $R/models > $R/models.log 2>&1; echo "models rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; tail -3 $R/tests.log; grep -E " b(1|16) float" $R/models.log | cut -c1-260

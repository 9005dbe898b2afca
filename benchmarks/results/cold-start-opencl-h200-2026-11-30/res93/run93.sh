#!/bin/bash
# cuDNN started on a thread with cuBLAS (cold start, before/after in one session); host OpenMP tests on 16 cores; EfficientNet-B0 on NVIDIA's OpenCL and Vulkan against eager
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res93; mkdir -p $R; cp .gpu/run93.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res93.tgz -C /tmp res93; }
gunzip -c .gpu/onednn/libdnnl.so.3.gz > /tmp/libdnnl.so.3
DEVICELAYER_ONEDNN=/tmp/libdnnl.so.3 DEVICELAYER_TEST_DEVICES=cuda:0,host timeout 150 python3 -m pytest -q tests/test_cuda_start.py tests/test_host_omp.py tests/test_host_omp_copy.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
mkdir -p /tmp/models
cp backends/cuda/backend.py /tmp/backend_after.py; cp .gpu/backend_before.py backends/cuda/backend.py
timeout 110 python3 -m benchmarks.cold_start --models-dir /tmp/models --model resnet50 --model efficientnet_b0 --repeat 3 --out $R/cold-before > $R/cold-before.log 2>&1; echo "cold before rc=$?" >> $R/rc.txt; pk
cp /tmp/backend_after.py backends/cuda/backend.py
timeout 110 python3 -m benchmarks.cold_start --models-dir /tmp/models --model resnet50 --model efficientnet_b0 --repeat 3 --out $R/cold-after > $R/cold-after.log 2>&1; echo "cold after rc=$?" >> $R/rc.txt; pk
timeout 170 python3 -m benchmarks.gpu_vs_torch --device opencl:0 --device vulkan:0 --model efficientnet_b0 --batch 1 --batch 16 --seconds 0.5 --out $R/effnet > $R/effnet.log 2>&1; echo "effnet rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; tail -3 $R/tests.log; for v in before after; do echo "== $v"; grep -E "first result" $R/cold-$v.log | cut -c1-170; done; grep -E "efficientnet_b0 b" $R/effnet.log | cut -c1-300

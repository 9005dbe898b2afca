#!/bin/bash
# the final tree (staging restored, flag blocks read behind the run): GPU tests; GPT-2/BERT steady runs before
# (1726073) and after; transformers against torch.compile (after: float32 and float16, batch 1 and 16; before:
# float32); ResNet-50 b16 against eager on NVIDIA's Vulkan, OpenCL and CUDA, before and after alternating
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
ROOT=$PWD; R=/tmp/res57; mkdir -p $R /tmp/models /tmp/before; cp .gpu/run57.sh .gpu/probe_lane.py .gpu/model_conv.py $R/
git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
tar -xzf .gpu/before-1726.tar.gz -C /tmp/before
pk() { tar -czf $OUT/res57.tgz -C /tmp res57; }
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1; lscpu | grep -E "Model name|^CPU\(s\)" >> $R/gpu.txt
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_replay_staging.py tests/test_lane.py tests/test_recording.py tests/test_transfers.py tests/test_onnx_indexing.py -k "not node_suite and not converter_of_folded and not model_matches" > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
python3 -m benchmarks.arch_models --models-dir /tmp/models --model gpt2 --model bert > $R/export.log 2>&1
for m in gpt2 bert; do
 (cd /tmp/before && PYTHONPATH=/tmp/site:/tmp/before timeout 30 python3 $ROOT/.gpu/probe_lane.py /tmp/models/$m.onnx cuda:0 2 >> $R/probe-before.log 2>&1)
 timeout 30 python3 .gpu/probe_lane.py /tmp/models/$m.onnx cuda:0 2 >> $R/probe-after.log 2>&1
done; pk
for d in vulkan:0 opencl:0 cuda:0; do
 DEVICELAYER_CACHE=/tmp/dlc-${d/:/} timeout 50 python3 .gpu/model_conv.py --device $d --seconds 1.5 >> $R/model-after.log 2>&1; echo "model after $d rc=$?" >> $R/rc.txt
 (cd /tmp/before && DEVICELAYER_CACHE=/tmp/dlc-${d/:/} PYTHONPATH=/tmp/site:/tmp/before timeout 30 python3 $ROOT/.gpu/model_conv.py --device $d --seconds 1.5 >> $R/model-before.log 2>&1; echo "model before $d rc=$?" >> $R/rc.txt)
 DEVICELAYER_CACHE=/tmp/dlc-${d/:/} timeout 30 python3 .gpu/model_conv.py --device $d --seconds 1.5 >> $R/model-after.log 2>&1; echo "model after2 $d rc=$?" >> $R/rc.txt
 pk
done
timeout 150 python3 -m benchmarks.gpu_vs_torch --model gpt2 --model bert --batch 1 --batch 16 --dtype float32 --dtype float16 --compile reduce-overhead --seconds 1.0 --out $R/vs-after > $R/vs-after.log 2>&1; echo "vs after rc=$?" >> $R/rc.txt; pk
(cd /tmp/before && PYTHONPATH=/tmp/site:/tmp/before timeout 70 python3 -m benchmarks.gpu_vs_torch --model gpt2 --model bert --batch 1 --batch 16 --compile reduce-overhead --seconds 1.0 --out $R/vs-before > $R/vs-before.log 2>&1; echo "vs before rc=$?" >> $R/rc.txt); pk
cat $R/rc.txt; grep -E "passed|failed" $R/tests.log | tail -1; grep "run_numpy" $R/probe-*.log; grep -h '"model"' $R/model-*.log | cut -c1-200; grep " float" $R/vs-*.log | cut -c1-200

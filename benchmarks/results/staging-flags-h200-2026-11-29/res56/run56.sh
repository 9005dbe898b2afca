#!/bin/bash
# pinned staging of a replay's inputs and outputs restored (MemoryPool.pinned_host_arrays), each device's flags in
# one block read in one transfer: tests on every device; GPT-2/BERT b1 steady runs, ResNet-50 b16 against eager,
# before (1726073) and after; transformers against torch.compile
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
ROOT=$PWD; R=/tmp/res56; mkdir -p $R /tmp/models /tmp/before; cp .gpu/run56.sh .gpu/probe_lane.py .gpu/model_conv.py $R/
git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
tar -xzf .gpu/before-1726.tar.gz -C /tmp/before
pk() { tar -czf $OUT/res56.tgz -C /tmp res56; }
timeout 170 python3 -m pytest -q -p no:cacheprovider tests/test_replay_staging.py tests/test_lane.py tests/test_recording.py tests/test_transfers.py tests/test_onnx_session.py "tests/test_onnx_indexing.py" -k "not node_suite and not converter_of_folded and not model_matches" > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
python3 -m benchmarks.arch_models --models-dir /tmp/models --model gpt2 --model bert > $R/export.log 2>&1
for m in gpt2 bert; do
 (cd /tmp/before && PYTHONPATH=/tmp/site:/tmp/before timeout 40 python3 $ROOT/.gpu/probe_lane.py /tmp/models/$m.onnx cuda:0 2 >> $R/probe-before.log 2>&1)
 timeout 40 python3 .gpu/probe_lane.py /tmp/models/$m.onnx cuda:0 2 >> $R/probe-after.log 2>&1
done; pk
for d in vulkan:0 opencl:0 cuda:0; do
 DEVICELAYER_CACHE=/tmp/dlc-${d/:/} timeout 60 python3 .gpu/model_conv.py --device $d --seconds 1.5 >> $R/model-after.log 2>&1; echo "model after $d rc=$?" >> $R/rc.txt
 (cd /tmp/before && DEVICELAYER_CACHE=/tmp/dlc-${d/:/} PYTHONPATH=/tmp/site:/tmp/before timeout 40 python3 $ROOT/.gpu/model_conv.py --device $d --seconds 1.5 >> $R/model-before.log 2>&1; echo "model before $d rc=$?" >> $R/rc.txt)
 DEVICELAYER_CACHE=/tmp/dlc-${d/:/} timeout 40 python3 .gpu/model_conv.py --device $d --seconds 1.5 >> $R/model-after.log 2>&1; echo "model after2 $d rc=$?" >> $R/rc.txt
 pk
done
timeout 90 python3 -m benchmarks.gpu_vs_torch --model gpt2 --model bert --batch 1 --compile reduce-overhead --seconds 1.5 --out $R/vs > $R/vs.log 2>&1; echo "vs rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; tail -3 $R/tests.log; grep "run_numpy" $R/probe-*.log; grep -h '"model"' $R/model-*.log | cut -c1-260; grep "b1 float" $R/vs.log

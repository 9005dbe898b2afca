#!/bin/bash
# flags read into pinned memory and waited for together: a steady run of GPT-2 and BERT (b1) on cuda:0, phases,
# before (1726073) and after alternating; half-precision transformers through the converted export; tests
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res55; mkdir -p $R /tmp/models /tmp/before; cp .gpu/run55.sh .gpu/probe_lane.py $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
tar -xzf .gpu/before-1726.tar.gz -C /tmp/before
pk() { tar -czf $OUT/res55.tgz -C /tmp res55; }
python3 -m benchmarks.arch_models --models-dir /tmp/models --model gpt2 --model bert > $R/export.log 2>&1
for k in 1 2; do for m in gpt2 bert; do
 (cd /tmp/before && PYTHONPATH=/tmp/site:/tmp/before timeout 60 python3 $OLDPWD/.gpu/probe_lane.py /tmp/models/$m.onnx cuda:0 3 >> $R/probe-before.log 2>&1)
 timeout 60 python3 .gpu/probe_lane.py /tmp/models/$m.onnx cuda:0 3 >> $R/probe-after.log 2>&1
done; done; pk
timeout 200 python3 -m benchmarks.gpu_vs_torch --model gpt2 --model bert --batch 1 --batch 16 --dtype float16 --compile reduce-overhead --seconds 1.5 --out $R/vs16 > $R/vs16.log 2>&1; echo "vs16 rc=$?" >> $R/rc.txt; pk
timeout 60 python3 -m benchmarks.cuda_item_times --arch gpt2 --batch 1 --top 10 --profile --out $R/items > $R/items.log 2>&1; echo "items rc=$?" >> $R/rc.txt; pk
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_onnx_indexing.py -k "bad_index or first_of_two or huge" > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; cat $R/probe-before.log $R/probe-after.log | grep -v Warn; tail -5 $R/vs16.log; tail -3 $R/tests.log

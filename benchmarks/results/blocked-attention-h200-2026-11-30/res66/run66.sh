#!/bin/bash
# GPU tests (the c9d9489 products + attention forms and pattern); attention forms on every NVIDIA device; transformers vs torch.compile
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res66; mkdir -p $R; cp .gpu/run66.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res66.tgz -C /tmp res66; }
DEVICELAYER_TEST_DEVICES=cuda:0,opencl:0,vulkan:0 timeout 170 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_gemm.py tests/test_cuda_conv.py tests/test_epilogue.py tests/test_attention_forms.py tests/test_attention_pattern.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt; pk
python3 -c "import devicelayer as dl; print([(d.id, d.info.name, d.info.local_memory, d.info.compute_units) for d in dl.devices()])" > $R/devices.txt 2>&1
timeout 120 python3 -m benchmarks.attention_forms --shape 1x12x128x64 --shape 16x4x128x64 --shape 16x12x128x64 --shape 1x12x197x64 --shape 1x6x1500x64 --shape 4x16x512x64 --mask --rows --seconds 0.12 --out $R/forms > $R/forms.log 2>&1; echo "forms rc=$?" >> $R/rc.txt; pk
timeout 170 python3 -m benchmarks.gpu_vs_torch --model gpt2 --model bert --batch 1 --batch 16 --dtype float32 --dtype float16 --compile reduce-overhead --seconds 1.0 --out $R/vs-after > $R/vs-after.log 2>&1; echo "vs after rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt; cat $R/devices.txt; grep -E "passed|failed" $R/tests.log | tail -2; grep -E "^FAILED|Error" $R/tests.log | head -20; cat $R/forms.log | cut -c1-250; grep " float" $R/vs-*.log | cut -c1-200

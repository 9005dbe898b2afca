#!/bin/bash
# final tree: host oneDNN tests (bound calls, matmul post-ops) on the host, epilogue and fusion tests on every
# device; in-process comparisons (bound, post-ops) and the host before (92a517b) / after on 16 cores
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=$OUT/res3; mkdir -p $R/host16/after $R/host16/before /tmp/models /tmp/before
tar -xzf .gpu/before.tar.gz -C /tmp/before
cp .gpu/run3.sh $R/run.sh
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1; lscpu | grep -E "Model name|^CPU\(s\)" >> $R/gpu.txt
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_epilogue.py tests/test_fusion.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
python3 -c "
import zipfile,glob
z=zipfile.ZipFile(glob.glob('.gpu/whl/onednn*.whl')[0]); open('/tmp/libdnnl.so.3','wb').write(z.read([n for n in z.namelist() if n.endswith('lib/libdnnl.so.3')][0]))"
export DEVICELAYER_ONEDNN=/tmp/libdnnl.so.3 DEVICELAYER_CACHE=/tmp/dlc-h
DEVICELAYER_REQUIRE=onednn DEVICELAYER_TEST_DEVICES=host timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_host_onednn.py tests/test_host_onednn_bind.py tests/test_host_onednn_matmul.py tests/test_host_stretch.py tests/test_lane.py tests/test_epilogue.py tests/test_recording.py > $R/tests-host.log 2>&1; echo "host tests rc=$?" >> $R/rc.txt
export DEVICELAYER_BACKENDS=host
cp .gpu/msmall/*.onnx /tmp/models/
for what in bound post-ops; do for m in ocr_classifier crnn bert_64 whisper_encoder_64; do
  timeout 60 python3 -m benchmarks.host_overhead $what /tmp/models/$m.onnx >> $R/$what.log 2>&1; done; done
for pass in 1 2; do
 for m in bert_64 whisper_encoder_64 crnn ocr_classifier squeezenet; do
  (cd /tmp/before && PYTHONPATH=/tmp/site:/tmp/before timeout 60 python3 -m benchmarks.host_vs_onnxruntime --models-dir /tmp/models --model $m --rounds 5 --block 0.2 --out $R/host16/before --tag before-$pass > $R/h-before-$m-$pass.log 2>&1; echo "before $m $pass rc=$?" >> $R/rc.txt)
  (timeout 60 python3 -m benchmarks.host_vs_onnxruntime --models-dir /tmp/models --model $m --rounds 5 --block 0.2 --out $R/host16/after --tag after-$pass > $R/h-after-$m-$pass.log 2>&1; echo "after $m $pass rc=$?" >> $R/rc.txt)
 done
done
tar -czf $OUT/res3.tgz -C $OUT res3
cat $R/rc.txt; tail -2 $R/tests.log $R/tests-host.log; cat $R/bound.log $R/post-ops.log

#!/bin/bash
# final tree: GPU tests, cold start before (df3b175) / after alternating twice, host on 16 cores before/after
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res; mkdir -p $R/after $R/before /tmp/models /tmp/before
tar -xzf .gpu/before.tar.gz -C /tmp/before
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1; lscpu | grep -E "Model name|^CPU\(s\)" >> $R/gpu.txt
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_start.py tests/test_load_once.py tests/test_onnx_rawdata.py tests/test_entry_points.py tests/test_registry.py tests/test_lane.py tests/test_cuda_conv.py tests/test_epilogue.py tests/test_onnx_indexing.py > $R/tests.log 2>&1; echo "tests rc=$?" >> $R/rc.txt
tar -czf $OUT/res.tgz -C /tmp res
M="--models-dir /tmp/models --model resnet50 --model efficientnet_b0 --device cuda:0 --repeat 3"
for k in 1 2; do
( cd /tmp/before && PYTHONPATH=/tmp/site:/tmp/before timeout 150 python3 -m benchmarks.cold_start $M --out $R/before/$k > $R/before/run$k.log 2>&1; echo "before $k rc=$?" >> $R/rc.txt )
timeout 150 python3 -m benchmarks.cold_start $M --out $R/after/$k > $R/after/run$k.log 2>&1; echo "after $k rc=$?" >> $R/rc.txt
done
tar -czf $OUT/res.tgz -C /tmp res
python3 -c "
import zipfile,glob
z=zipfile.ZipFile(glob.glob('.gpu/whl/onednn*.whl')[0]); open('/tmp/libdnnl.so.3','wb').write(z.read([n for n in z.namelist() if n.endswith('lib/libdnnl.so.3')][0]))"
export DEVICELAYER_ONEDNN=/tmp/libdnnl.so.3 DEVICELAYER_BACKENDS=host DEVICELAYER_CACHE=/tmp/dlc-h
cp .gpu/msmall/*.onnx /tmp/models/
for pass in 1 2; do
 for m in bert_64 whisper_encoder_64 crnn ocr_classifier; do
  (cd /tmp/before && PYTHONPATH=/tmp/site:/tmp/before timeout 60 python3 -m benchmarks.host_vs_onnxruntime --models-dir /tmp/models --model $m --rounds 5 --block 0.2 --out $R/host16/before --tag before-$pass > $R/h-before-$m-$pass.log 2>&1; echo "before $m $pass rc=$?" >> $R/rc.txt)
  (timeout 60 python3 -m benchmarks.host_vs_onnxruntime --models-dir /tmp/models --model $m --rounds 5 --block 0.2 --out $R/host16/after --tag after-$pass > $R/h-after-$m-$pass.log 2>&1; echo "after $m $pass rc=$?" >> $R/rc.txt)
 done
done
tar -czf $OUT/res.tgz -C /tmp res

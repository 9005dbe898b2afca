#!/bin/bash
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
export DEVICELAYER_CACHE=/tmp/dlc-j
R=$PWD
python3 -c "
import zipfile,glob
z=zipfile.ZipFile(glob.glob('.gpu/whl/onednn*.whl')[0]); open('/tmp/libdnnl.so.3','wb').write(z.read([n for n in z.namelist() if n.endswith('lib/libdnnl.so.3')][0]))"
export DEVICELAYER_ONEDNN=/tmp/libdnnl.so.3
mkdir -p /tmp/before /tmp/res /tmp/models && tar -xzf .gpu/before.tar.gz -C /tmp/before && cp .gpu/msmall/*.onnx /tmp/models/
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_lane.py tests/test_onnx_loader.py tests/test_host_stretch.py tests/test_host_omp.py > /tmp/res/tests.log 2>&1; echo "tests rc=$?" >> /tmp/res/rc.txt
tar -czf $OUT/res.tgz -C /tmp res
G="--device cuda:0 --device opencl:0 --device vulkan:0 --model shufflenet_v2 --batch 1 --batch 16 --compile none --seconds 1"
(cd /tmp/before && PYTHONPATH=/tmp/site:/tmp/before timeout 150 python3 -m benchmarks.gpu_vs_torch $G --out /tmp/res/gpu/before > /tmp/res/gpu-before.log 2>&1; echo "gpu before rc=$?" >> /tmp/res/rc.txt)
(timeout 150 python3 -m benchmarks.gpu_vs_torch $G --out /tmp/res/gpu/after > /tmp/res/gpu-after.log 2>&1; echo "gpu after rc=$?" >> /tmp/res/rc.txt)
tar -czf $OUT/res.tgz -C /tmp res
export DEVICELAYER_BACKENDS=host
for pass in 1 2; do
 for m in crnn bert_64 ocr_classifier whisper_encoder_64 shufflenet_v2 mobilenet_v2; do
  (cd /tmp/before && PYTHONPATH=/tmp/site:/tmp/before timeout 60 python3 -m benchmarks.host_vs_onnxruntime --models-dir /tmp/models --model $m --rounds 5 --block 0.2 --out /tmp/res/host16/before --tag before-$pass > /tmp/res/h-before-$m-$pass.log 2>&1; echo "before $m $pass rc=$?" >> /tmp/res/rc.txt)
  (timeout 60 python3 -m benchmarks.host_vs_onnxruntime --models-dir /tmp/models --model $m --rounds 5 --block 0.2 --out /tmp/res/host16/after --tag after-$pass > /tmp/res/h-after-$m-$pass.log 2>&1; echo "after $m $pass rc=$?" >> /tmp/res/rc.txt)
 done
 tar -czf $OUT/res.tgz -C /tmp res
done

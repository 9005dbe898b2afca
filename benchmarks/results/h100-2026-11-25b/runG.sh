#!/bin/bash
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
export DEVICELAYER_CACHE=/tmp/dlc-g
R=$PWD
mkdir -p /tmp/before /tmp/res && tar -xzf .gpu/before.tar.gz -C /tmp/before
nproc > /tmp/res/machine.txt; nvidia-smi -L >> /tmp/res/machine.txt 2>&1; python3 -c "import onnxruntime, numpy; print('ort', onnxruntime.__version__, 'numpy', numpy.__version__)" >> /tmp/res/machine.txt 2>&1
M="--model crnn --model bert_64 --model ocr_classifier --model whisper_encoder_64"
for pass in 1 2; do
  (cd /tmp/before && PYTHONPATH=/tmp/site:/tmp/before timeout 120 python3 -m benchmarks.host_vs_onnxruntime --models-dir $R/.gpu/msmall $M --rounds 5 --out /tmp/res/host/before --tag before-$pass > /tmp/res/host-before-$pass.log 2>&1; echo "host before $pass rc=$?" >> /tmp/res/rc.txt)
  (timeout 120 python3 -m benchmarks.host_vs_onnxruntime --models-dir $R/.gpu/msmall $M --rounds 5 --out /tmp/res/host/after --tag after-$pass > /tmp/res/host-after-$pass.log 2>&1; echo "host after $pass rc=$?" >> /tmp/res/rc.txt)
done; tar -czf $OUT/res.tgz -C /tmp res
G="--device cuda:0 --device vulkan:0 --model resnet50 --model bert --batch 1 --compile none --seconds 1"
for pass in 1; do
  (cd /tmp/before && PYTHONPATH=/tmp/site:/tmp/before timeout 150 python3 -m benchmarks.gpu_vs_torch $G --out /tmp/res/gpu/before > /tmp/res/gpu-before-$pass.log 2>&1; echo "gpu before $pass rc=$?" >> /tmp/res/rc.txt)
  (timeout 150 python3 -m benchmarks.gpu_vs_torch $G --out /tmp/res/gpu/after > /tmp/res/gpu-after-$pass.log 2>&1; echo "gpu after $pass rc=$?" >> /tmp/res/rc.txt)
done; tar -czf $OUT/res.tgz -C /tmp res
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_lane.py tests/test_host_stretch.py > /tmp/res/tests.log 2>&1; echo "tests rc=$?" >> /tmp/res/rc.txt
tar -czf $OUT/res.tgz -C /tmp res

#!/bin/bash
# the host on 16 cores with oneDNN on an OpenMP runtime of its own: 18 models exported in the same process (PyTorch's libgomp loaded and started), then again without PyTorch
source .gpu/enter.sh; export XDG_RUNTIME_DIR=/tmp
R=/tmp/res92; mkdir -p $R; cp .gpu/run92.sh $R/; git log --oneline -1 > $R/tree.txt; git status --short >> $R/tree.txt
pk() { tar -czf $OUT/res92.tgz -C /tmp res92; }
gunzip -c .gpu/onednn/libdnnl.so.3.gz > /tmp/libdnnl.so.3; export DEVICELAYER_ONEDNN=/tmp/libdnnl.so.3
ldconfig -p | grep gomp > $R/gomp.txt; ls -la /opt/torch/.venv/lib/python3.12/site-packages/torch/lib/ | grep -i omp >> $R/gomp.txt
mkdir -p /tmp/models
timeout 280 python3 -m benchmarks.host_vs_onnxruntime --models-dir /tmp/models --rounds 3 --block 0.2 --out $R/torch > $R/torch.log 2>&1; echo "torch rc=$?" >> $R/rc.txt; pk
timeout 250 python3 -m benchmarks.host_vs_onnxruntime --models-dir /tmp/models --rounds 3 --block 0.2 --out $R/plain > $R/plain.log 2>&1; echo "plain rc=$?" >> $R/rc.txt; pk
cat $R/rc.txt $R/gomp.txt; for v in torch plain; do echo "== $v"; grep -E "ratio" $R/$v.log | cut -c1-110; grep "geometric" $R/$v.log; done
python3 -c "import json,glob; [print(f, json.load(open(f))['versions'].get('onednn_threads')) for f in glob.glob('$R/*/host-vs-ort*.json')]"

#!/bin/bash
for i in 1 2 3 4; do
  for t in before after; do
    if [ $t = before ]; then d=/tmp/before-slice; else d=/work/main; fi
    s=$(date +%s)
    (cd $d && timeout 1200 /work/main/.venv/bin/python -m benchmarks.host_vs_onnxruntime --models-dir /tmp/models_all --rounds 4 --out /tmp/hvs/$t --tag pass$i > /tmp/hvs/$t-$i.log 2>&1)
    echo "$t $i rc=$? $(( $(date +%s) - s )) s" >> /tmp/hvs/progress.txt
  done
done

import sys, numpy as np, onnx
import devicelayer.onnx as dlo
from benchmarks.host_vs_onnxruntime import random_feeds
from benchmarks.host_overhead import stretches
model = onnx.load(f"/tmp/models/{sys.argv[1]}.onnx"); feeds = random_feeds(model, 0)
plan = dlo.load(model).compile(["host"]); plan.run_numpy(feeds)
for s in stretches(plan):
    for l, c in zip(s.labels, s.calls): print(l, getattr(c, "__qualname__", type(c).__name__))

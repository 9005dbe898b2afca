import sys, time, statistics, collections, numpy as np, onnx
sys.argv=[sys.argv[0]]+sys.argv[1:]
from benchmarks.host_overhead import stretches
from benchmarks.host_vs_onnxruntime import random_feeds
import devicelayer.onnx as dlo
m=onnx.load(sys.argv[1]); feeds=random_feeds(m,0)
plan=dlo.load(m).compile(["host"]); plan.run_numpy(feeds)
calls=[(l,f) for s in stretches(plan) for l,f in zip(s.labels,s.calls)]
times=collections.defaultdict(list)
with np.errstate(all="ignore"):
    for _ in range(30):
        for l,f in calls:
            t0=time.perf_counter(); f(); times[l].append(time.perf_counter()-t0)
for l,f in calls[:int(sys.argv[2]) if len(sys.argv)>2 else 60]:
    fn=getattr(f,'func',f)
    print(f"{statistics.median(times[l])*1e6:8.1f} {l[:70]:70s} {getattr(fn,'__qualname__',type(fn).__name__)[:50]}")

"""ShuffleNet-v2 (batch 1) on vulkan:0, fused against unfused plans in one process; per-node profiles."""
import sys, time, collections
sys.path.insert(0, ".")
import numpy as np, onnx, os
if os.environ.get("SWITCH"): sys.setswitchinterval(float(os.environ["SWITCH"]))
import devicelayer as dl
from devicelayer.onnx import load
from benchmarks.host_vs_onnxruntime import random_feeds
model = onnx.load(sys.argv[1]); feeds = random_feeds(model, 0)
dev = dl.device("vulkan:0")
def timed(plan, n=200):
    for _ in range(5): plan.run_numpy(feeds)
    t0 = time.perf_counter()
    for _ in range(n): plan.run_numpy(feeds)
    return (time.perf_counter() - t0) / n * 1e3
plans = {}
for name, fuse in (("fused", True), ("unfused", False)):
    t0 = time.perf_counter(); plans[name] = load(model).compile([dev], fuse=fuse); plans[name].run_numpy(feeds)
    print(name, "compile+first s", round(time.perf_counter() - t0, 2), flush=True)
for r in range(3):
    print("round", r, {k: round(timed(p), 3) for k, p in plans.items()}, flush=True)
for name in ():
    acc = collections.defaultdict(list)
    for _ in range(5):
        plans[name].run_numpy(feeds, profile=True)
        for row in plans[name].last_profile:
            acc[(row["node"], row["op"])].append(row["device_us"])
    rows = sorted(((np.median(v), k) for k, v in acc.items()), reverse=True)
    print(name, "profile sum us", round(sum(d for d, _ in rows)), "nodes", len(rows))
    for d, k in rows[:12]:
        print(f"   {d:8.1f} {k[1]} {k[0][:100]}")

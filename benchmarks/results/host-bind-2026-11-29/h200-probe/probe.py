"""Host plans of small models on this machine: each stretch's settled form, its time and the run's."""
import sys, time, statistics, onnx
import devicelayer.onnx as dlo
from benchmarks.host_vs_onnxruntime import random_feeds
from benchmarks.host_overhead import stretches
for name in sys.argv[1:]:
    m = onnx.load(f'/tmp/models/{name}.onnx'); f = random_feeds(m, 0)
    plan = dlo.load(m).compile(["host"])
    for _ in range(50): plan.run_numpy(f)
    ss = stretches(plan)
    def med(fn, n=100):
        ts = []
        for _ in range(7):
            t0 = time.perf_counter()
            for _ in range(n): fn()
            ts.append((time.perf_counter() - t0) / n * 1e6)
        return round(min(ts)), round(statistics.median(ts))
    print(name, "run us (min, med)", med(lambda: plan.run_numpy(f)), "stretches:",
          [(len(s), "team" if s.team else "alone", med(s) if not s.team else None) for s in ss])
    plan.release()

"""EfficientNet-B0 float32 b1 on opencl:0 and vulkan:0: per-op device time of a profiled run, the replay's time, and
where the host spends a replay (cProfile)."""
import collections, cProfile, io, pstats, sys, time
from pathlib import Path
import numpy as np, onnx
import devicelayer as dl
from devicelayer.onnx import load
from benchmarks import arch_models
from benchmarks.host_vs_onnxruntime import random_feeds
path = Path("/tmp/models/efficientnet_b0.onnx")
if not path.exists():
    path.parent.mkdir(parents=True, exist_ok=True)
    arch_models.export(arch_models.ARCHS["efficientnet_b0"], path)
m = onnx.load(str(path)); feeds = random_feeds(m, 0)
for dev_id in sys.argv[1:]:
    dev = dl.device(dev_id)
    plan = load(m).compile([dev])
    for _ in range(20):
        plan.run_numpy(feeds)
    t0 = time.perf_counter()
    for _ in range(50):
        plan.run_numpy(feeds)
    print(f"== {dev_id}: replay {1e3 * (time.perf_counter() - t0) / 50:.3f} ms")
    feeds_t = {k: dl.tensor(v, dev) for k, v in feeds.items()}
    try:
        for _ in range(3):
            plan(profile=True, **feeds_t)
        prof = plan.last_profile
    except Exception as exc:
        print("no profile:", type(exc).__name__, exc)
        prof = []
    by_op = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for r in prof:
        e = by_op[r["op"]]; e[0] += 1; e[1] += r["device_us"]; e[2] += r["host_us"]
    print(f"profiled: {len(prof)} nodes, device {sum(r['device_us'] for r in prof):.0f} us, host {sum(r['host_us'] for r in prof):.0f} us")
    for op, (n, d, h) in sorted(by_op.items(), key=lambda kv: -kv[1][1])[:12]:
        print(f"  {op:28s} {n:4d} device {d:8.1f} us  host {h:8.1f} us")
    for r in sorted(prof, key=lambda r: -r["device_us"])[:8]:
        print(f"  top {r['node'][:60]:60s} {r['op']:20s} {r['device_us']:8.1f} us")
    pr = cProfile.Profile(); pr.enable()
    for _ in range(20):
        plan.run_numpy(feeds)
    pr.disable(); s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(12); print(s.getvalue()[:3000])

"""Where a steady-state run_numpy of a model's plan goes on one device: wall time per run, then each phase
(wrapped with perf_counter) per run.  python3 .gpu/probe_lane.py MODEL.onnx DEVICE [seconds]"""
import statistics, sys, time
from collections import defaultdict
import numpy as np
import devicelayer as dl
from devicelayer.onnx import load
import devicelayer.graph.plan as plan_mod, devicelayer.graph.replay as replay_mod
import devicelayer.recording as rec_mod, devicelayer.memory as mem_mod, devicelayer.events as ev_mod

path, dev_id = sys.argv[1], sys.argv[2]
seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 2.0
plan = load(path).compile([dl.device(dev_id)])
import onnx
m = onnx.load(path, load_external_data=False)
rng = np.random.default_rng(0)
feeds = {}
for i in m.graph.input:
    shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
    et = i.type.tensor_type.elem_type
    if et == onnx.TensorProto.INT64:
        feeds[i.name] = (np.ones(shape, np.int64) if "mask" in i.name else rng.integers(0, 400, shape)).astype(np.int64)
    else:
        feeds[i.name] = rng.standard_normal(shape).astype(onnx.helper.tensor_dtype_to_np_dtype(et))
for _ in range(10):
    plan.run_numpy(feeds)
times = []
end = time.perf_counter() + seconds
while time.perf_counter() < end:
    t = time.perf_counter(); plan.run_numpy(feeds); times.append(time.perf_counter() - t)
print(f"{path.split('/')[-1]} {dev_id}: run_numpy median {statistics.median(times)*1e3:.3f} ms, min {min(times)*1e3:.3f} ({len(times)} runs)")
acc = defaultdict(float); cnt = defaultdict(int)
def wrap(obj, name, label):
    f = getattr(obj, name, None)
    if f is None:
        return
    def w(*a, **k):
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            acc[label] += time.perf_counter() - t; cnt[label] += 1
    setattr(obj, name, w)
wrap(plan_mod, "_check_flags", "check_flags")
wrap(replay_mod, "_collect", "collect outputs (download + wait + copy)")
wrap(replay_mod, "copy_into", "copy_into (inputs, outputs)")
wrap(rec_mod.Recording, "replay", "recording.replay (submit)")
wrap(mem_mod.MemoryPool, "upload", "pool.upload")
wrap(mem_mod.MemoryPool, "download", "pool.download")
wrap(ev_mod.Event, "wait", "event.wait")
wrap(replay_mod, "run", "replay.run (all)")
n = 0
end = time.perf_counter() + seconds
t0 = time.perf_counter()
while time.perf_counter() < end:
    plan.run_numpy(feeds); n += 1
wall = (time.perf_counter() - t0) / n
print(f"  wrapped: {wall*1e3:.3f} ms per run")
for k in sorted(acc, key=lambda k: -acc[k]):
    print(f"  {k:45s} {acc[k]/n*1e3:8.3f} ms/run  {cnt[k]/n:5.1f} calls/run")

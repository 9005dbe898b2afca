"""What one clEnqueueNDRangeKernel costs on NVIDIA's OpenCL: raw PyOpenCL with whole buffers, sub-buffers, many
arguments, non-uniform sizes; then each recorded launch of EfficientNet-B0's plan timed as it is enqueued."""
import collections, statistics, sys, time
from pathlib import Path
import numpy as np, onnx
import pyopencl as cl
import devicelayer as dl
from devicelayer.onnx import load
from benchmarks.host_vs_onnxruntime import random_feeds

dev = dl.device("opencl:0")
ctx, q = dev.context, dev.queue
src = """
__kernel void k3(__global float* a, __global const float* b, __global const float* c) { size_t i = get_global_id(0); a[i] = b[i] + c[i]; }
__kernel void k12(__global float* a, __global const float* b, __global const float* c, __global const float* d,
  __global const float* e, __global const float* f, int n1, int n2, int n3, int n4, float s1, float s2) {
  size_t i = get_global_id(0); a[i] = b[i] + c[i] + d[i] + e[i] + f[i] + n1 + s1; }
"""
prg = cl.Program(ctx, src).build()
n = 1 << 16
bufs = [cl.Buffer(ctx, cl.mem_flags.READ_WRITE, n * 4 * 8) for _ in range(6)]
subs = [b.get_sub_region(4096, n * 4) for b in bufs]
def per_enqueue(kernel, gsize, lsize, reps=2000):
    q.finish()
    t0 = time.perf_counter()
    for _ in range(reps):
        cl.enqueue_nd_range_kernel(q, kernel, gsize, lsize)
    t1 = time.perf_counter()
    q.finish()
    return (t1 - t0) / reps * 1e6
k = cl.Kernel(prg, "k3"); k.set_args(*bufs[:3]); print(f"k3 whole buffers: {per_enqueue(k, (n,), (256,)):.1f} us")
k = cl.Kernel(prg, "k3"); k.set_args(*subs[:3]); print(f"k3 sub-buffers: {per_enqueue(k, (n,), (256,)):.1f} us")
k = cl.Kernel(prg, "k3"); k.set_args(*bufs[:3]); print(f"k3 no local size: {per_enqueue(k, (n,), None):.1f} us")
try:
    k = cl.Kernel(prg, "k3"); k.set_args(*bufs[:3]); print(f"k3 non-uniform {n - 3}/256: {per_enqueue(k, (n - 3,), (256,)):.1f} us")
except cl.Error as exc:
    print("non-uniform refused:", exc)
k = cl.Kernel(prg, "k12"); k.set_args(*bufs, np.int32(1), np.int32(2), np.int32(3), np.int32(4), np.float32(1), np.float32(2))
print(f"k12 whole buffers: {per_enqueue(k, (n,), (256,)):.1f} us")
k = cl.Kernel(prg, "k12"); k.set_args(*subs, np.int32(1), np.int32(2), np.int32(3), np.int32(4), np.float32(1), np.float32(2))
print(f"k12 sub-buffers: {per_enqueue(k, (n,), (256,)):.1f} us")
k = cl.Kernel(prg, "k3"); k.set_args(*bufs[:3]); print(f"k3 2-D: {per_enqueue(k, (256, n // 256), (256, 1)):.1f} us")

path = Path("/tmp/models/efficientnet_b0.onnx")
if not path.exists():
    from benchmarks import arch_models
    path.parent.mkdir(parents=True, exist_ok=True)
    arch_models.export(arch_models.ARCHS["efficientnet_b0"], path)
m = onnx.load(str(path)); feeds = random_feeds(m, 0)
plan = load(m).compile([dev])
for _ in range(10):
    plan.run_numpy(feeds)
from devicelayer.graph.replay import Segment
natives = []
for sub in plan._plans():
    for prepared in sub._cache.values():
        if prepared.replay is not None:
            natives += [w.recording.native for w in prepared.replay.work if isinstance(w, Segment)]
items = [e for nat in natives for e in nat if type(e) is tuple]
times = collections.defaultdict(list)
for r in range(20):
    q.finish()
    for i, e in enumerate(items):
        t0 = time.perf_counter()
        cl.enqueue_nd_range_kernel(q, e[0], e[1], e[2])
        times[i].append(time.perf_counter() - t0)
    q.finish()
med = {i: statistics.median(v) * 1e6 for i, v in times.items()}
print(f"plan: {len(items)} launches, enqueue sum {sum(med.values()):.0f} us, median {statistics.median(med.values()):.1f} us")
by_entry = collections.defaultdict(list)
for i, e in enumerate(items):
    by_entry[e[4].entry].append(med[i])
for entry, v in sorted(by_entry.items(), key=lambda kv: -sum(kv[1]))[:12]:
    e0 = next(e for e in items if e[4].entry == entry)
    print(f"  {entry[:50]:50s} {len(v):3d} launches {sum(v):8.1f} us ({statistics.median(v):.1f} each) args {e0[0].num_args} global {e0[1]} local {e0[2]}")
for i in sorted(med, key=lambda i: -med[i])[:6]:
    e = items[i]
    print(f"  slowest {e[3][:60]:60s} {med[i]:7.1f} us global {e[1]} local {e[2]}")

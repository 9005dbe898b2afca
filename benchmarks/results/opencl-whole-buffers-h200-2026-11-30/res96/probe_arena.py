"""NVIDIA's OpenCL: does a launch whose buffers are sub-buffers of one parent written by the launch before block
the enqueueing thread?  Raw PyOpenCL chains (sub-buffers of one parent, of different parents, whole buffers), and
EfficientNet-B0's plan replayed with its arena against one allocation per tensor."""
import dataclasses, sys, time
from pathlib import Path
import numpy as np, onnx
import pyopencl as cl
import devicelayer as dl
import devicelayer.graph.plan as plan_mod
from devicelayer.onnx import load
from benchmarks.host_vs_onnxruntime import random_feeds

dev = dl.device(sys.argv[1] if len(sys.argv) > 1 else "opencl:0")
ctx, q = dev.context, dev.queue
prg = cl.Program(ctx, """
__kernel void chainstep(__global float* out, __global const float* in, int iters) {
  size_t i = get_global_id(0); float v = in[i];
  for (int k = 0; k < iters; ++k) v = v * 0.999f + 0.001f;
  out[i] = v; }""").build()
n = 1 << 16
nb = n * 4
parent = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nb * 8)
one_parent = [parent.get_sub_region(k * nb, nb) for k in range(8)]
parents = [cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nb * 2) for _ in range(8)]
other_parents = [p.get_sub_region(nb, nb) for p in parents]
wholes = [cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nb) for _ in range(8)]
def chain(bufs, iters, length=200):
    kernels = []
    for j in range(length):
        k = cl.Kernel(prg, "chainstep"); k.set_args(bufs[(j + 1) % 8], bufs[j % 8], np.int32(iters)); kernels.append(k)
    for _ in range(2):
        q.finish(); t0 = time.perf_counter()
        for k in kernels:
            cl.enqueue_nd_range_kernel(q, k, (n,), (256,))
        t1 = time.perf_counter(); q.finish(); t2 = time.perf_counter()
    return (t1 - t0) / length * 1e6, (t2 - t0) / length * 1e6
for iters in (0, 2000):
    for name, bufs in (("sub-buffers of one parent", one_parent), ("sub-buffers of 8 parents", other_parents),
                       ("whole buffers", wholes)):
        e, t = chain(bufs, iters)
        print(f"iters {iters:5d} {name:28s}: enqueue {e:7.1f} us a launch, total {t:7.1f} us a launch")

path = Path("/tmp/models/efficientnet_b0.onnx")
if not path.exists():
    from benchmarks import arch_models
    path.parent.mkdir(parents=True, exist_ok=True)
    arch_models.export(arch_models.ARCHS["efficientnet_b0"], path)
m = onnx.load(str(path)); feeds = random_feeds(m, 0)
def replay_ms(p):
    for _ in range(10):
        p.run_numpy(feeds)
    best = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(20):
            p.run_numpy(feeds)
        best.append((time.perf_counter() - t0) / 20 * 1e3)
    return min(best), p.run_numpy(feeds)
arena = load(m).compile([dev])
orig = plan_mod.plan_arena
plan_mod.plan_arena = lambda slots, alignment=256: dataclasses.replace(orig(slots, alignment), peak=1 << 62)
separate = load(m).compile([dev])
plan_mod.plan_arena = orig
for r in range(2):
    a, out_a = replay_ms(arena)
    s, out_s = replay_ms(separate)
    same = all(np.array_equal(out_a[k], out_s[k]) for k in out_a)
    print(f"EfficientNet-B0 b1 replay: arena {a:.3f} ms, one buffer per tensor {s:.3f} ms, outputs equal {same}")

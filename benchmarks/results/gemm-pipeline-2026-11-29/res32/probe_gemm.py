"""The tiled GEMM's pipelines (matmul.Pipeline) forced one by one on each device: values against NumPy (float64)
over aligned, ragged, transposed and batched products, then ms per 4096^3 (or --n) call, back-to-back calls then
one wait, against cuBLAS through CuPy where a CUDA device is present.

    python probe_gemm.py DEVICE [DEVICE ...] [--n N] [--check-only] [--micro E]"""
import argparse
import statistics
import sys
import time

import numpy as np

import devicelayer as dl
from devicelayer.kernels import tiles
from devicelayer.kernels.ops import matmul as mm
from devicelayer.kernels.op import TensorType, get
from devicelayer.kernels.runner import execute, plan_for, programs
from devicelayer.ops import names  # noqa: F401

P = mm.Pipeline
G = mm.GPU_PIPELINE
# name -> (pipeline (None: the code's own), micro-tile runs forced or None)
# name -> (pipeline (None: the code's own), micro-tile runs forced or None, UNROLL kept before: "all", "none",
# "compute" (the shared reads and multiply-adds), "memory" (the global loads and shared stores))
VARIANTS = {
    "plain": (P(), None, "all"),
    "default": (None, None, "all"),
    "plain-none": (P(), None, "none"),
    "plain-compute": (P(), None, "compute"),
    "plain-memory": (P(), None, "memory"),
    "G": (G, True, "all"),
    "G-none": (G, True, "none"),
    "G-compute": (G, True, "compute"),
    "G-memory": (G, True, "memory"),
    "G-novec-none": (G._replace(vec=0), True, "none"),
    "G-novec": (G._replace(vec=0), True, "all"),
    "G-nosw": (G._replace(swizzle=0), True, "all"),
    "G-s1": (G._replace(stages=1), True, "all"),
    "G-novec-s1": (G._replace(vec=0, stages=1), True, "all"),
    "G-nopf": (G._replace(prefetch=0), True, "all"),
}
_source = mm.kernel_source


def unrolled(text, keep):
    lines = text.split("\n")
    out = []
    for i, line in enumerate(lines):
        if line.strip() == "UNROLL" and keep != "all":
            nxt = lines[i + 1].strip()
            memory = "LOADS_" in nxt or "TM * TN" in nxt
            if keep == "none" or (keep == "compute" and memory) or (keep == "memory" and not memory):
                continue
        out.append(line)
    return "\n".join(out)


def kernel_source(name):
    text = _source(name)
    return unrolled(text, _forced.get("unroll", "all")) if name == "gemm_tiled.dlk" else text


mm.kernel_source = kernel_source
_forced = {}
_real_runs = mm.tile_runs
_real_pipeline = mm.gemm_pipeline


def runs(info):
    forced = _forced.get("runs")
    return _real_runs(info) if forced is None else forced


mm.tile_runs = runs


def pipeline(info, elem, micro, M, N, K):
    p = _forced.get("p")
    if p is None:
        return _real_pipeline(info, elem, micro, M, N, K)
    if p.vec and not (runs(info) and micro >= 4):
        p = p._replace(vec=0)
    if p.aligned and (M % (16 * micro) or N % (16 * micro) or K % p.bk):
        p = p._replace(aligned=0)
    return p._replace(aligned=int(M % (16 * micro) == 0 and N % (16 * micro) == 0 and K % p.bk == 0))


mm.gemm_pipeline = pipeline
CHECKS = [((128, 256), (256, 128)), ((129, 70), (70, 131)), ((3, 64, 48), (3, 48, 80)), ((256, 512), (512, 256)),
          ((2, 1, 200, 33), (1, 4, 33, 17))]


def check(dev, rng):
    worst = 0.0
    for sa, sb in CHECKS:
        for ta_ in (False, True):
            a = rng.standard_normal(sa).astype(np.float32)
            b = rng.standard_normal(sb).astype(np.float32)
            A = dl.tensor(np.ascontiguousarray(np.swapaxes(a, -1, -2)), dev) if ta_ else dl.tensor(a, dev)
            if ta_:
                got = dl.run_op("matmul", [dl.run_op("transpose", [A], perm=list(range(a.ndim - 2)) + [a.ndim - 1, a.ndim - 2])[0], dl.tensor(b, dev)])[0].numpy() if hasattr(dl, "run_op") else None
            from devicelayer.kernels.runner import run as run_op
            out = run_op("matmul", [dl.tensor(a, dev), dl.tensor(b, dev)])[0].numpy()
            ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
            worst = max(worst, float(np.max(np.abs(out - ref)) / max(1.0, np.max(np.abs(ref)))))
    return worst


def per_call(call, rounds=5, budget=0.3):
    call().wait()
    t0 = time.perf_counter()
    call().wait()
    once = max(time.perf_counter() - t0, 1e-6)
    reps = max(1, min(50, int(budget / once)))
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps - 1):
            call()
        call().wait()
        times.append((time.perf_counter() - t0) / reps)
    return statistics.median(times)


def timed(dev, n, micro):
    op = get("matmul")
    f32 = np.dtype(np.float32)
    ins = [TensorType((n, n), f32), TensorType((n, n), f32)]
    attrs, outs = op.prepare(ins, {})
    with tiles.forcing(micro):
        plan = plan_for(op, dev, ins, outs, attrs)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    bufs = []
    for x in (a, b):
        buf = dev.pool.allocate(x.nbytes, f32)
        dev.pool.upload(buf, x).wait()
        bufs.append(buf)
    out = dev.pool.allocate(n * n * 4, f32)
    compiled = programs(op, dev, plan, ins, outs, attrs)
    ms = per_call(lambda: execute(op, dev, plan, ins, outs, attrs, bufs, [out], [], [], compiled)) * 1e3
    y = np.empty((n, n), np.float32)
    dev.pool.download(out, y).wait() if hasattr(dev.pool, "download") else None
    for x in (*bufs, out):
        dev.pool.free(x)
    return ms, plan.steps[0].spec.name


def cublas_ms(n):
    import cupy

    class Done:
        def __init__(self, s):
            self.s = s

        def wait(self):
            self.s.synchronize()
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        a = cupy.random.standard_normal((n, n), dtype=np.float32)
        b = cupy.random.standard_normal((n, n), dtype=np.float32)
        c = cupy.empty((n, n), np.float32)

        def call():
            cupy.matmul(a, b, out=c)
            return Done(stream)
        return per_call(call) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("devices", nargs="+")
    ap.add_argument("--n", type=int, action="append")
    ap.add_argument("--micro", type=int, action="append")
    ap.add_argument("--variant", action="append")
    ap.add_argument("--check-only", action="store_true")
    args = ap.parse_args()
    peer = {}
    if any(d.startswith("cuda") for d in dl.devices() for d in [d.id]):
        for n in args.n or [4096]:
            peer[n] = cublas_ms(n)
            print(f"cuBLAS {n}^3: {peer[n]:.3f} ms", flush=True)
    for dev_id in args.devices:
        dev = dl.device(dev_id)
        for name in args.variant or VARIANTS:
            _forced["p"], _forced["runs"], _forced["unroll"] = VARIANTS[name]
            mm.gemm_spec.cache_clear()
            for micro in args.micro or [8]:
                try:
                    with tiles.forcing(micro):
                        err = check(dev, np.random.default_rng(0))
                    line = f"{dev_id} {name:22s} micro {micro}: check {err:.1e}"
                    if not args.check_only:
                        for n in args.n or [4096]:
                            ms, kname = timed(dev, n, micro)
                            line += f"; {n}^3 {ms:.3f} ms [{kname}]"
                            if n in peer:
                                line += f" ({peer[n] / ms:.3f}x cuBLAS)"
                    print(line, flush=True)
                except Exception as exc:  # noqa: BLE001
                    print(f"{dev_id} {name} micro {micro}: {type(exc).__name__}: {str(exc)[:400]}", flush=True)


main()

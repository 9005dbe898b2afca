"""float16 products on vulkan:0 through the MMA form: slices staged as 16-byte words against elements, K slices of
32 and 64, against cuBLAS (torch.matmul, float16) in the same process; ms per call and the error against float64.

    python probe_words.py [--n 4096 ...] [--shape M,N,K ...]"""
import argparse
import statistics
import time

import numpy as np

import devicelayer as dl
from devicelayer.kernels.ops import matmul as mm
from devicelayer.kernels.op import TensorType, get
from devicelayer.kernels.runner import execute, plan_for, programs
from devicelayer.ops import names  # noqa: F401

M = mm.MMA_PIPELINE
VARIANTS = {
    "default": None,
    "elements": M._replace(stage_words=0),
    "k64s1": M._replace(bk=64, stages=1),
    "k64s1-el": M._replace(bk=64, stages=1, stage_words=0),
    "k16": M._replace(bk=16),
    "s1": M._replace(stages=1),
    "no-vload": M._replace(vload=0, stage_words=0),
}


class Done:
    def __init__(self, s):
        self.s = s

    def wait(self):
        self.s.synchronize()


def per_call(call, rounds=5, budget=0.25):
    call().wait()
    t0 = time.perf_counter()
    call().wait()
    once = max(time.perf_counter() - t0, 1e-6)
    reps = max(1, min(200, int(budget / once)))
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps - 1):
            call()
        call().wait()
        times.append((time.perf_counter() - t0) / reps)
    return statistics.median(times)


def timed(dev, a, b):
    op = get("matmul")
    ins = [TensorType.of(x.shape, x.dtype) for x in (a, b)]
    checked, outs = op.prepare(ins, {})
    plan = plan_for(op, dev, ins, outs, checked)
    bufs = []
    for x in (a, b):
        buf = dev.pool.allocate(x.nbytes, x.dtype)
        dev.pool.upload(buf, x).wait()
        bufs.append(buf)
    out = dev.pool.allocate(outs[0].size * 2, outs[0].dtype)
    compiled = programs(op, dev, plan, ins, outs, checked)
    ms = per_call(lambda: execute(op, dev, plan, ins, outs, checked, bufs, [out], [], [], compiled)) * 1e3
    y = np.empty(outs[0].shape, outs[0].dtype)
    dev.pool.download(out, y).wait()
    for x in (*bufs, out):
        dev.pool.free(x)
    spec = [s.spec for s in plan.steps if getattr(s, "spec", None) is not None][0]
    return ms, spec.name, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="vulkan:0")
    ap.add_argument("--n", type=int, action="append")
    ap.add_argument("--shape", action="append")
    ap.add_argument("--variant", action="append")
    args = ap.parse_args()
    dev = dl.device(args.device)
    print(dev.id, dev.info.name, "takes_mma", mm.takes_mma(dev.info, "f16"), flush=True)
    try:
        import torch
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    shapes = [(n, n, n) for n in (args.n or [])] + [tuple(int(v) for v in s.split(",")) for s in (args.shape or [])]
    for m, n, k in shapes:
        a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
        b = rng.uniform(-1, 1, (k, n)).astype(np.float16)
        want = a[:64].astype(np.float64) @ b.astype(np.float64)
        peer = 1.0
        if torch is not None:
            ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                def call():
                    torch.matmul(ta, tb)
                    return Done(s)
                peer = per_call(call) * 1e3
        flops = 2.0 * m * n * k
        print(f"GEMM {m}x{n}x{k} float16: cuBLAS {peer:.3f} ms {flops / peer / 1e9:.1f} TFLOP/s", flush=True)
        for name in args.variant or VARIANTS:
            forced = VARIANTS[name]
            try:
                if forced is None:
                    ms, kname, y = timed(dev, a, b)
                else:
                    with mm.forcing_pipeline(forced):
                        ms, kname, y = timed(dev, a, b)
                e = float(np.max(np.abs(y[:64].astype(np.float64) - want)) / max(1.0, float(np.max(np.abs(want)))))
                print(f"  {name:10s} {ms:8.3f} ms {flops / ms / 1e9:7.1f} TFLOP/s {peer / ms:.3f}x cuBLAS err {e:.1e} "
                      f"[{kname}]", flush=True)
            except Exception as exc:  # noqa: BLE001
                print(f"  {name:10s} FAILED {type(exc).__name__}: {str(exc)[:1500]}", flush=True)


if __name__ == "__main__":
    main()

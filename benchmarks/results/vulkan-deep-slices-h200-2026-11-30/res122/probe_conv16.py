"""ResNet-50's convolutions at batch 16 on vulkan:0, float16 (and float32 for reference): the plan each variant
makes (kernels, defines that matter) and ms per call against cuDNN (PyTorch) in the same process.

    python probe_conv16.py [--device vulkan:0] [--dtype float16] [--variant NAME ...] [--only k3]"""
import argparse
import statistics
import time

import numpy as np

import devicelayer as dl
from devicelayer.kernels import tiles
from devicelayer.kernels.ops import conv as cv
from devicelayer.kernels.ops import matmul as mm
from devicelayer.kernels.op import TensorType, get
from devicelayer.kernels.runner import execute, plan_for, programs
from devicelayer.ops import names  # noqa: F401

CONVS = [(64, 64, 56, 1, 1), (64, 64, 56, 3, 1), (64, 256, 56, 1, 1), (256, 64, 56, 1, 1), (128, 128, 28, 3, 1),
         (256, 256, 14, 3, 1), (1024, 256, 14, 1, 1), (512, 512, 7, 3, 1), (512, 2048, 7, 1, 1), (3, 64, 224, 7, 2),
         (128, 128, 56, 3, 2), (256, 256, 28, 3, 2), (512, 512, 14, 3, 2)]
_split = cv.conv_split


def variants():
    return {
        "default": (None, None, None),
        "m8": (8, None, None),
        "m8-nosplit": (8, None, 1),
        "m4-k32": (4, mm.MMA_PIPELINE._replace(vload=0, prefetch=0, aligned=0, swizzle=0), None),
        "m4-nosplit": (4, None, 1),
        "m2": (2, None, None),
        "m4-k64s1": (4, cv.MMA_CONV_PIPELINE._replace(bk=64, stages=1), None),
        "m4-k64s2": (4, cv.MMA_CONV_PIPELINE._replace(bk=64, stages=2), None),
        "m8-k64s1": (8, cv.MMA_CONV_PIPELINE._replace(bk=64, stages=1), None),
        "m4-k32s1": (4, cv.MMA_CONV_PIPELINE._replace(bk=32, stages=1), None),
        "k16": (None, cv.GPU_CONV_PIPELINE._replace(bk=16), None),
        "m8-k16": (8, cv.GPU_CONV_PIPELINE._replace(bk=16), None),
        "m4-k16": (4, cv.GPU_CONV_PIPELINE._replace(bk=16), None),
        "m4": (4, None, None),
    }


class Done:
    def __init__(self, s):
        self.s = s

    def wait(self):
        self.s.synchronize()


def per_call(call, rounds=5, budget=0.2):
    call().wait()
    t0 = time.perf_counter()
    call().wait()
    once = max(time.perf_counter() - t0, 1e-6)
    reps = max(1, min(100, int(budget / once)))
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps - 1):
            call()
        call().wait()
        times.append((time.perf_counter() - t0) / reps)
    return statistics.median(times)


def timed(dev, arrays, attrs, micro, pipe, split):
    op = get("conv")
    ins = [TensorType.of(a.shape, a.dtype) for a in arrays]
    checked, outs = op.prepare(ins, dict(attrs))
    cv.conv_split = (lambda *a, **k: split) if split is not None else _split
    try:
        import contextlib
        with (tiles.forcing(micro) if micro else contextlib.nullcontext()), \
                (mm.forcing_pipeline(pipe) if pipe else contextlib.nullcontext()):
            plan = plan_for(op, dev, ins, outs, checked)
    finally:
        cv.conv_split = _split
    bufs = []
    for x in arrays:
        buf = dev.pool.allocate(x.nbytes, x.dtype)
        dev.pool.upload(buf, x).wait()
        bufs.append(buf)
    out = dev.pool.allocate(outs[0].size * outs[0].dtype.itemsize, outs[0].dtype)
    temps = [dev.pool.allocate(t.size * t.dtype.itemsize, t.dtype) for t in getattr(plan, "temps", [])]
    compiled = programs(op, dev, plan, ins, outs, checked)
    ms = per_call(lambda: execute(op, dev, plan, ins, outs, checked, bufs, [out], temps, [], compiled)) * 1e3
    y = np.empty(outs[0].shape, outs[0].dtype)
    dev.pool.download(out, y).wait()
    for x in (*bufs, out, *temps):
        dev.pool.free(x)
    names_ = []
    for s in plan.steps:
        spec = getattr(s, "spec", None)
        if spec is not None:
            d = dict(spec.defines)
            names_.append(f"{spec.name}[TM{d.get('TM')}xTN{d.get('TN')} BK{d.get('BK')} MMA{d.get('MMA')} "
                          f"CI{d.get('CINNER')} SPLIT{d.get('SPLIT', 1)} g{s.global_size[0] // 256}]")
    return ms, " + ".join(names_), y


def err(y, want):
    return float(np.max(np.abs(y.astype(np.float64) - want)) / max(1.0, float(np.max(np.abs(want)))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="vulkan:0")
    ap.add_argument("--dtype", action="append")
    ap.add_argument("--variant", action="append")
    ap.add_argument("--only", default="")
    ap.add_argument("--first", type=int, default=99)
    args = ap.parse_args()
    dev = dl.device(args.device)
    print(dev.id, dev.info.name, "CUs", dev.info.compute_units, "local", dev.info.local_memory, flush=True)
    try:
        import torch
        import torch.nn.functional as F
        torch.backends.cudnn.allow_tf32 = False  # (float32 in float32, as the model benchmarks compare)
        torch.backends.cuda.matmul.allow_tf32 = False
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    vs = variants()
    for dtype in args.dtype or ["float16"]:
        tot = {}
        for C, Mo, H, k, st in CONVS[:args.first]:
            if args.only and f"k{k}" != args.only:
                continue
            x = rng.uniform(-1, 1, (16, C, H, H)).astype(dtype)
            w = (rng.uniform(-1, 1, (Mo, C, k, k)) / np.sqrt(C * k * k)).astype(dtype)
            attrs = {"strides": [st, st], "pads": [k // 2] * 4}
            if torch is not None:
                tx, tw = torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda()
                s = torch.cuda.Stream()
                with torch.cuda.stream(s):
                    def call():
                        F.conv2d(tx, tw, stride=st, padding=k // 2)
                        return Done(s)
                    peer = per_call(call) * 1e3
                    ref = F.conv2d(tx.double(), tw.double(), stride=st, padding=k // 2).cpu().numpy()
            else:
                peer, ref = 1.0, np.zeros((16, Mo, (H + 2 * (k // 2) - k) // st + 1, (H + 2 * (k // 2) - k) // st + 1))
            print(f"conv {dtype} {C}->{Mo} {H}^2 k{k} s{st} b16: cuDNN {peer:.3f} ms", flush=True)
            tot["cudnn"] = tot.get("cudnn", 0) + peer
            for name in args.variant or vs:
                micro, pipe, split = vs[name]
                try:
                    ms, kname, y = timed(dev, [x, w], attrs, micro, pipe, split)
                    tot[name] = tot.get(name, 0) + ms
                    print(f"  {name:12s} {ms:7.3f} ms ({ms / peer:5.2f}x) err {err(y, ref):.1e} {kname}", flush=True)
                except Exception as exc:  # noqa: BLE001
                    print(f"  {name:12s} FAILED {type(exc).__name__}: {str(exc)[:500]}", flush=True)
        print(dtype, "sums ms:", {k: round(v, 3) for k, v in tot.items()}, flush=True)


if __name__ == "__main__":
    main()

"""Wide (4 x 8) micro-tiles and vector reads: every convolution geometry of a torchvision model at a batch (forward hooks), each timed on the given devices
with K walked element by element (old: channels_inner -> 0) and tap by tap (new), at the static tile rule and at
each forced edge, against cuDNN (PyTorch, TF32 off) in the same process; ms per call on device-resident buffers;
largest error against the float64 result relative to its largest magnitude; sums weighted by how often each
geometry occurs in the model.

    python probe_conv32.py DEVICE [DEVICE ...] [--model resnet50] [--batch 16] [--dtype float32] [--edges]"""
import argparse
import collections
import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
import numpy as np

import devicelayer as dl
from devicelayer.kernels import tiles
from devicelayer.kernels.ops import conv as cv
from devicelayer.kernels.op import TensorType, get
from devicelayer.kernels.runner import _work, plan_for, programs
from devicelayer.ops import names  # noqa: F401

_real_inner = cv.channels_inner
_real_split = cv.conv_split
_real_pointwise = cv.pointwise_products


def per_call(call, rounds=3, budget=0.1):
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


REPEAT = 10  # launches of the plan in one recording: device time without the host's per-call cost


def timed(dev, arrays, attrs, micro=None, split=None, pipe=None):
    import contextlib
    from devicelayer.kernels.ops import matmul as mm
    op = get("conv")
    ins = [TensorType.of(a.shape, a.dtype) for a in arrays]
    checked, outs = op.prepare(ins, dict(attrs))
    cv.conv_split = (lambda *a: split) if split else _real_split
    try:
        with (tiles.forcing(micro) if micro else contextlib.nullcontext()), \
                (mm.forcing_pipeline(pipe) if pipe else contextlib.nullcontext()):
            plan = plan_for(op, dev, ins, outs, checked)
    finally:
        cv.conv_split = _real_split
    bufs = []
    for x in arrays:
        buf = dev.pool.allocate(x.nbytes, x.dtype)
        dev.pool.upload(buf, x).wait()
        bufs.append(buf)
    out = dev.pool.allocate(outs[0].size * outs[0].dtype.itemsize, outs[0].dtype)
    temps = [dev.pool.allocate(t.size * t.dtype.itemsize, t.dtype) for t in plan.temps]
    compiled = programs(op, dev, plan, ins, outs, checked)
    work = _work(op, dev, plan, ins, outs, checked, bufs, [out], temps, compiled)
    rec = dev.record()
    for _ in range(REPEAT):
        for w in work:
            rec.launch(w[1], w[2], w[3], w[4])
    rec.finish()
    ms = per_call(rec.replay) * 1e3 / REPEAT
    y = np.empty(outs[0].shape, outs[0].dtype)
    dev.pool.download(out, y).wait()
    rec.release()
    for x in (*bufs, out, *temps):
        dev.pool.free(x)
    names_ = [s.spec.name for s in plan.steps if getattr(s, "spec", None) is not None]
    return ms, "+".join(names_), y


class Done:
    def __init__(self, s):
        self.s = s

    def wait(self):
        self.s.synchronize()


def geometries(model, batch):
    import torch
    import torchvision
    m = getattr(torchvision.models, model)(weights=None).eval()
    seen = collections.Counter()

    def hook(mod, inp, out):
        x = inp[0]
        seen[(tuple(x.shape), tuple(mod.weight.shape), mod.stride, mod.padding, mod.dilation, mod.groups)] += 1
    for mod in m.modules():
        if isinstance(mod, torch.nn.Conv2d):
            mod.register_forward_hook(hook)
    with torch.no_grad():
        m(torch.zeros(batch, 3, 224, 224))
    return seen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("devices", nargs="+")
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--edges", action="store_true")
    ap.add_argument("--pointwise", action="store_true", help="only the unstrided 1x1 layers: GEMM kernels or tiled")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    dt = np.dtype(args.dtype)
    devs = [dl.device(d) for d in args.devices]
    rng = np.random.default_rng(0)
    geos = geometries(args.model, args.batch)
    print(f"{args.model} b{args.batch} {args.dtype}: {len(geos)} geometries, {sum(geos.values())} convolutions", flush=True)
    tot = collections.Counter()
    for (xs, ws, st, pd, dil, grp), count in geos.items():
        if args.pointwise and not (ws[2:] == (1, 1) and st == (1, 1) and not any(pd)):
            continue
        x = rng.uniform(-1, 1, xs).astype(dt)
        w = (rng.uniform(-1, 1, ws) / np.sqrt(np.prod(ws[1:]))).astype(dt)
        attrs = {"strides": list(st), "pads": list(pd) * 2, "dilations": list(dil), "group": grp}
        tx, tw = torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            def call():
                F.conv2d(tx, tw, stride=st, padding=pd, dilation=dil, groups=grp)
                return Done(s)
            peer = per_call(call) * 1e3
        ref = F.conv2d(tx.double(), tw.double(), stride=st, padding=pd, dilation=dil, groups=grp).cpu().numpy()
        scale = max(1.0, float(np.abs(ref).max()))
        tot["cudnn"] += count * peer
        line = f"x{count} {xs} w{ws} s{st[0]} g{grp}: cuDNN {peer:.4f}"
        for dev in devs:
            from devicelayer.kernels.ops import matmul as mm
            PV = mm.Pipeline(bk=8, stages=2, vec=1, runs=1)
            P8 = mm.Pipeline(bk=8, stages=2)
            variants = [("static", None, None, None)]
            for shape in (4, (4, 8), 8):
                variants.append(("plain", shape, None, None))
                if args.dtype == "float32":
                    variants.append(("vec", shape, None, PV))
            for form, edge, split, pipe in variants:
                try:
                    ms, kname, y = timed(dev, [x, w], attrs, edge, split, pipe)
                    err = float(np.abs(y.astype(np.float64) - ref).max()) / scale
                    es = ("x".join(map(str, edge)) if isinstance(edge, tuple) else str(edge)) if edge else ""
                    key = f"{dev.id} {form}" + (f" e{es}" if edge else "")
                    tot[key] += count * ms
                    line += f" | {key} {ms:.4f} ({ms / peer:.2f}x) err {err:.0e}" + (f" [{kname[:110]}]" if not edge else "")
                except Exception as exc:  # noqa: BLE001
                    line += f" | {dev.id} {form} {edge} FAILED {type(exc).__name__}: {str(exc)[:300]}"
        print(line, flush=True)
    print("weighted sums ms:", {k: round(v, 3) for k, v in tot.items()}, flush=True)


if __name__ == "__main__":
    main()

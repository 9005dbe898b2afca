"""The tiled convolution's pipelines (conv.conv_pipeline) forced one by one: values against the op's NumPy
reference over small convolutions (strided, padded, grouped, 1x1, transposed), then ms per call of ResNet-50's
convolutions at batch 16 for each micro-tile edge (benchmarks.tile_tuning's timing).

    python probe_conv.py DEVICE [DEVICE ...] [--variant NAME ...] [--conv NAME ...]"""
import argparse

import sys
import os
sys.path.insert(0, os.getcwd())
import numpy as np

import devicelayer as dl
from devicelayer.kernels import tiles
from devicelayer.kernels.ops import conv as cv
from devicelayer.kernels.ops import matmul as mm
from devicelayer.kernels.op import get
from devicelayer.kernels.runner import run as run_op
from devicelayer.ops import names  # noqa: F401
from benchmarks import tile_tuning as tt

P = mm.Pipeline
VARIANTS = {
    "plain": (P(), None),
    "k8": (P(bk=8), None),
    "k8-s2": (P(bk=8, stages=2), None),
    "R-k8-s2": (P(bk=8, stages=2), True),
    "R-vec-k8-s2": (P(bk=8, stages=2, vec=1), True),
    "R-vec-s2": (P(stages=2, vec=1), True),
    "R-vec-k8": (P(bk=8, vec=1), True),
    "s2": (P(stages=2), None),
}
_forced = {}
_real_runs = mm.tile_runs


def runs(info):
    forced = _forced.get("runs")
    return _real_runs(info) if forced is None else forced


def pipeline(info, elem, micro):
    p = _forced.get("p", P())
    if p.vec and not (runs(info) and micro >= 4):
        p = p._replace(vec=0)
    return p


mm.tile_runs = runs
cv.conv_pipeline = pipeline
CHECKS = [((2, 8, 13, 11), (24, 8, 3, 3), dict(strides=[2, 1], pads=[1, 0, 1, 2])),
          ((1, 32, 9, 9), (48, 32, 1, 1), {}),
          ((2, 16, 10, 10), (32, 4, 3, 3), dict(group=4, pads=[1, 1, 1, 1], dilations=[2, 1])),
          ((1, 64, 14, 14), (64, 64, 3, 3), dict(pads=[1, 1, 1, 1]))]


def check(dev, rng):
    worst = 0.0
    op = get("conv")
    for xs, ws, attrs in CHECKS:
        x = rng.standard_normal(xs).astype(np.float32)
        w = rng.standard_normal(ws).astype(np.float32)
        b = rng.standard_normal(ws[0]).astype(np.float32)
        out = run_op("conv", [dl.tensor(x, dev), dl.tensor(w, dev), dl.tensor(b, dev)], **attrs)[0].numpy()
        full = {"strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [1, 1], "group": 1, **attrs}
        ref = op.reference([x.astype(np.float64), w.astype(np.float64), b.astype(np.float64)], op.prepare(
            [dl.kernels.op.TensorType(x.shape, np.dtype(np.float32)), dl.kernels.op.TensorType(w.shape, np.dtype(np.float32)),
             dl.kernels.op.TensorType(b.shape, np.dtype(np.float32))], full)[0])[0]
        worst = max(worst, float(np.max(np.abs(out - ref)) / max(1.0, np.max(np.abs(ref)))))
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("devices", nargs="+")
    ap.add_argument("--variant", action="append")
    ap.add_argument("--conv", action="append")
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args()
    for dev_id in args.devices:
        dev = dl.device(dev_id)
        for name in args.variant or VARIANTS:
            _forced["p"], _forced["runs"] = VARIANTS[name]
            try:
                errs = []
                for micro in (2, 4, 8):
                    with tiles.forcing(micro):
                        errs.append(check(dev, np.random.default_rng(0)))
                cells = []
                total = {}
                for conv in args.conv or ["r50-3x3-64", "r50-3x3-128", "r50-3x3-256", "r50-3x3-512", "r50-1x1-256-64",
                                          "r50-1x1-1024-256"]:
                    label, op_name, ins, attrs, flops = tt._case_conv(conv, args.batch)
                    got = tt._devicelayer(dev, op_name, ins, attrs, 3, 0.2)
                    ms = {e: t * 1e3 for e, t in got["times"].items() if e != tiles.REGISTER}
                    best = min(ms, key=ms.get)
                    cells.append(f"{conv} " + "/".join(f"{ms[e]:.3f}" for e in sorted(ms)) + f" best {best}")
                    for e, v in ms.items():
                        total[e] = total.get(e, 0.0) + v
                    total["best"] = total.get("best", 0.0) + ms[best]
                print(f"{dev_id} {name:12s} check {max(errs):.1e}; ms at edges 2/4/8: " + "; ".join(cells)
                      + "; sums " + ", ".join(f"{k} {v:.3f}" for k, v in total.items()), flush=True)
            except Exception as exc:  # noqa: BLE001
                print(f"{dev_id} {name}: {type(exc).__name__}: {str(exc)[:400]}", flush=True)


main()

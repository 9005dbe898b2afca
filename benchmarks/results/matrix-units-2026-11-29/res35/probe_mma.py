"""float16 products and convolutions on vulkan:0 with the tiled kernels' MMA form (matrix units) and without it,
against cuBLAS / cuDNN (PyTorch) in float16 in the same process: ms per call (back-to-back calls, one wait), and
the largest error against float64 relative to the output's largest magnitude.

    python probe_mma.py [--device vulkan:0] [--n 1024 --n 4096] [--variant NAME ...] [--convs]"""
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

P = mm.Pipeline
M = mm.MMA_PIPELINE
VARIANTS = {  # name -> (pipeline forced or None: the code's own)
    "default": None,
    "mma-k16": M._replace(bk=16),
    "mma-s1": M._replace(stages=1),
    "mma-k16-s1": M._replace(bk=16, stages=1),
    "mma-nopf": M._replace(prefetch=0),
    "mma-nosw": M._replace(swizzle=0),
    "no-mma": mm.GPU_PIPELINE,
}
CONV_VARIANTS = {"default": None, "mma-k16": cv.MMA_CONV_PIPELINE._replace(bk=16),
                 "mma-s1": cv.MMA_CONV_PIPELINE._replace(stages=1), "no-mma": cv.GLSL_GPU_PIPELINE}
# ResNet-50's convolution geometries at batch 16: (C, M, H, k, stride)
CONVS = [(64, 64, 56, 1, 1), (64, 64, 56, 3, 1), (64, 256, 56, 1, 1), (256, 64, 56, 1, 1), (128, 128, 28, 3, 1),
         (256, 256, 14, 3, 1), (1024, 256, 14, 1, 1), (512, 512, 7, 3, 1), (512, 2048, 7, 1, 1), (3, 64, 224, 7, 2)]


def per_call(call, rounds=5, budget=0.3):
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


def timed(dev, name, arrays, attrs, micro=None):
    op = get(name)
    ins = [TensorType.of(a.shape, a.dtype) for a in arrays]
    checked, outs = op.prepare(ins, dict(attrs))
    if micro:
        with tiles.forcing(micro):
            plan = plan_for(op, dev, ins, outs, checked)
    else:
        plan = plan_for(op, dev, ins, outs, checked)
    bufs = []
    for x in arrays:
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


class Done:
    def __init__(self, s):
        self.s = s

    def wait(self):
        self.s.synchronize()


def err(y, want):
    return float(np.max(np.abs(y.astype(np.float64) - want)) / max(1.0, float(np.max(np.abs(want)))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="vulkan:0")
    ap.add_argument("--n", type=int, action="append")
    ap.add_argument("--variant", action="append")
    ap.add_argument("--convs", action="store_true")
    args = ap.parse_args()
    dev = dl.device(args.device)
    print(dev.id, dev.info.name, "matrix units:", dev.info.matrix_units, "subgroup", dev.info.subgroup_size,
          "local", dev.info.local_memory, "takes_mma", mm.takes_mma(dev.info, "f16"), flush=True)
    import torch
    rng = np.random.default_rng(0)
    for n in args.n or [4096]:
        a = rng.uniform(-1, 1, (n, n)).astype(np.float16)
        b = rng.uniform(-1, 1, (n, n)).astype(np.float16)
        want = a[:64].astype(np.float64) @ b.astype(np.float64)
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            def call():
                torch.matmul(ta, tb)
                return Done(s)
            peer = per_call(call) * 1e3
        flops = 2.0 * n ** 3
        print(f"GEMM {n}^3 float16: cuBLAS (torch) {peer:.3f} ms {flops / peer / 1e9:.1f} TFLOP/s", flush=True)
        for name in args.variant or VARIANTS:
            forced = VARIANTS[name]
            try:
                if forced is None:
                    ms, kname, y = timed(dev, "matmul", [a, b], {})
                else:
                    with mm.forcing_pipeline(forced):
                        ms, kname, y = timed(dev, "matmul", [a, b], {})
                print(f"  {name:12s} {ms:8.3f} ms {flops / ms / 1e9:7.1f} TFLOP/s {peer / ms:.3f}x cuBLAS "
                      f"err {err(y[:64], want):.1e} [{kname}]", flush=True)
            except Exception as exc:  # noqa: BLE001
                print(f"  {name:12s} FAILED {type(exc).__name__}: {str(exc)[:2000]}", flush=True)
    if args.convs:
        import torch.nn.functional as F
        tot = {}
        for C, Mo, H, k, st in CONVS:
            x = rng.uniform(-1, 1, (16, C, H, H)).astype(np.float16)
            w = (rng.uniform(-1, 1, (Mo, C, k, k)) / np.sqrt(C * k * k)).astype(np.float16)
            attrs = {"strides": [st, st], "pads": [k // 2] * 4}
            tx, tw = torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda()
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                def call():
                    F.conv2d(tx, tw, stride=st, padding=k // 2)
                    return Done(s)
                peer = per_call(call) * 1e3
                ref = F.conv2d(tx.float(), tw.float(), stride=st, padding=k // 2).cpu().numpy().astype(np.float64)
            line = f"conv {C}->{Mo} {H}^2 k{k} s{st} b16: cuDNN {peer:.3f} ms"
            tot["cudnn"] = tot.get("cudnn", 0) + peer
            for name, forced in CONV_VARIANTS.items():
                try:
                    if forced is None:
                        ms, kname, y = timed(dev, "conv", [x, w], attrs)
                    else:
                        with mm.forcing_pipeline(forced):
                            ms, kname, y = timed(dev, "conv", [x, w], attrs)
                    tot[name] = tot.get(name, 0) + ms
                    line += f"; {name} {ms:.3f} ({ms / peer:.2f}x, err {err(y, ref):.1e})"
                except Exception as exc:  # noqa: BLE001
                    line += f"; {name} FAILED {type(exc).__name__}: {str(exc)[:600]}"
            print(line, flush=True)
        print("sums ms:", {k: round(v, 3) for k, v in tot.items()}, flush=True)


if __name__ == "__main__":
    main()

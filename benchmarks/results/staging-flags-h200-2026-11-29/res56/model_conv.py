"""A torchvision model at a batch on one device, devicelayer alone while it is timed, then PyTorch eager (TF32 off)
in the same process: median ms of run_numpy / of eager with host inputs and outputs over --seconds; --old walks
the tiled convolution's K element by element (channels_inner -> 0) and never splits it (conv_split -> 1).

    python model_conv.py --device vulkan:0 [--old] [--dtype float32] [--model resnet50] [--batch 16]"""
import argparse
import json
import time

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="vulkan:0")
ap.add_argument("--old", action="store_true")
ap.add_argument("--before", action="store_true",
                help="the tiled convolution's pipeline and square tiles before the wide tiles (no 4 x 8, no vectors)")
ap.add_argument("--pointwise-tiled", action="store_true", help="unstrided 1x1 layers on the tiled convolution")
ap.add_argument("--dtype", default="float32")
ap.add_argument("--seconds", type=float, default=3.0)
ap.add_argument("--batch", type=int, default=16)
ap.add_argument("--model", action="append")
args = ap.parse_args()

import numpy as np  # noqa: E402
import torch  # noqa: E402

import devicelayer as dl  # noqa: E402
from devicelayer.kernels.ops import conv as cv  # noqa: E402
from benchmarks import gpu_vs_torch as g  # noqa: E402
from devicelayer.onnx import load  # noqa: E402

torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
if args.pointwise_tiled:
    cv.pointwise_products = lambda *a: False
if args.old:
    cv.channels_inner = lambda *a: 0
    cv.conv_split = lambda *a: 1
if args.before:
    from devicelayer.kernels import tiles
    from devicelayer.kernels.ops import matmul as mm
    _real_pipeline = cv.conv_pipeline

    def _old_pipeline(info, elem, micro, product=(mm.MMA_LEAST,) * 3):
        p = _real_pipeline(info, elem, micro, product)
        if p.mma or mm.forced_pipeline() is not None or info.device_type != "gpu" or elem == "f64":
            return p
        return mm.Pipeline(bk=8, stages=2) if info.kernel_language == "glsl" else mm.Pipeline()
    cv.conv_pipeline = _old_pipeline
    cv.wide_columns = lambda info, elem, micro, *a: micro
    tiles.WIDE_TILES = ()
half = args.dtype == "float16"
for name in args.model or ["resnet50"]:
    module, example, names = g._arch(name).build()
    module = module.cuda().eval()
    example = g._batched(example, args.batch, torch)
    if half:
        module = module.half()
        example = tuple(x.half() if x.is_floating_point() else x for x in example)
    with torch.no_grad():
        model_bytes = g._export(module, tuple(x.cuda() for x in example), names)
        want = module(*[x.cuda() for x in example])
        want = (want[0] if isinstance(want, (tuple, list)) else want).float().cpu().numpy()
    torch.cuda.synchronize()
    feeds = dict(zip(names, [x.numpy() for x in example]))
    dev = dl.device(args.device)
    t0 = time.perf_counter()
    plan = load(model_bytes).compile([dev])
    out = plan.run_numpy(feeds)
    first = time.perf_counter() - t0
    got = list(out.values())[0] if isinstance(out, dict) else out[0]
    err = g._max_rel(got, want)
    ms = g._median_ms(lambda: plan.run_numpy(feeds), args.seconds)

    def eager():
        with torch.no_grad():
            y = module(*[x.cuda() for x in example])
            (y[0] if isinstance(y, (tuple, list)) else y).cpu()
    eager()
    eager_ms = g._median_ms(eager, args.seconds)
    row = {"model": name, "device": args.device, "dtype": args.dtype, "batch": args.batch, "old": args.old, "before": args.before, "pointwise_tiled": args.pointwise_tiled,
           "ms": ms, "eager_ms": eager_ms, "ratio": ms / eager_ms, "first_run_s": first, "max_rel_err": err,
           "finite": bool(np.isfinite(got).all())}
    print(json.dumps(row), flush=True)

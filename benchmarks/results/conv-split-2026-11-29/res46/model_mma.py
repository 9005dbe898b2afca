"""ResNet-50 and EfficientNet-B0 in float16 at batch 16 on vulkan:0, devicelayer alone in the process after the
export (PyTorch does no GPU work while devicelayer is timed): median ms of run_numpy (host inputs and outputs) over
--seconds, with the MMA form (default) or without it (--no-mma).

    python model_mma.py [--no-mma] [--seconds 4]"""
import argparse
import json
import time

ap = argparse.ArgumentParser()
ap.add_argument("--no-mma", action="store_true")
ap.add_argument("--seconds", type=float, default=4.0)
ap.add_argument("--model", action="append")
args = ap.parse_args()

import torch  # noqa: E402

import devicelayer as dl  # noqa: E402
import devicelayer.kernels.ops.matmul as mm  # noqa: E402
from benchmarks import gpu_vs_torch as g  # noqa: E402
from devicelayer.onnx import load  # noqa: E402

if args.no_mma:
    mm.takes_mma = lambda info, elem: False
rows = []
for name in args.model or ["resnet50", "efficientnet_b0"]:
    module, example, names = g._arch(name).build()
    module = module.cuda().eval().half()
    example = tuple(x.half() if x.is_floating_point() else x for x in g._batched(example, 16, torch))
    with torch.no_grad():
        model_bytes = g._export(module, tuple(x.cuda() for x in example), names)
        want = module(*[x.cuda() for x in example])
        want = (want[0] if isinstance(want, (tuple, list)) else want).float().cpu().numpy()
    torch.cuda.synchronize()
    feeds = dict(zip(names, [x.numpy() for x in example]))
    dev = dl.device("vulkan:0")
    t0 = time.perf_counter()
    plan = load(model_bytes).compile([dev])
    out = plan.run_numpy(feeds)
    first = time.perf_counter() - t0
    got = list(out.values())[0] if isinstance(out, dict) else out[0]
    err = g._max_rel(got, want)
    ms = g._median_ms(lambda: plan.run_numpy(feeds), args.seconds)
    row = {"model": name, "mma": not args.no_mma, "ms": ms, "first_run_s": first, "max_rel_err": err,
           "finite": bool(__import__("numpy").isfinite(got).all())}
    rows.append(row)
    print(json.dumps(row), flush=True)

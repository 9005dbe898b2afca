"""GPU time of GPT-2's and BERT-mini's replayed graphs with attention as nodes (cuBLAS products, transposes) and
as the blocked kernel with each tiling.  python3 .gpu/probe_att.py"""
import sys, contextlib, numpy as np, torch
from benchmarks.gpu_vs_torch import _arch, _batched, _export, _checked, _float16_converted
from benchmarks.cuda_item_times import item_times
import devicelayer as dl
from devicelayer.onnx import load
from devicelayer.kernels.ops import attention as A

def exported(arch, dtype, batch):
    module, example, names = _arch(arch).build()
    module = module.cuda().eval()
    example = _batched(example, batch, torch)
    if dtype != "float32":
        module = module.to(getattr(torch, dtype))
        example = tuple(x.to(getattr(torch, dtype)) if x.is_floating_point() else x for x in example)
    host = [x.numpy() for x in example]
    with torch.no_grad():
        data = _export(module, tuple(x.cuda() for x in example), names)
        if dtype == "float16" and _checked(data) is not None:
            data = _float16_converted(module, tuple(x.cuda() for x in example), names)
    return data, dict(zip(names, host))

orig = A.Attention.beats_vendor_products
for arch in sys.argv[1].split(","):
    for dtype in sys.argv[2].split(","):
        for batch in (1, 16):
            data, feeds = exported(arch, dtype, batch)
            ref = None
            for variant in ("nodes", "auto", "r1", "r2", "r4", "s8", "s8r4"):
                A.BLOCKED_GROUP = 64 if variant.startswith("s8") else 256
                A.Attention.beats_vendor_products = (lambda self, i, a, info: False) if variant == "nodes" else \
                    (lambda self, i, a, info: True)
                rows = {"r1": 1, "r2": 2, "r4": 4, "s8r4": 4}.get(variant)
                ctx = A.forcing("blocked", rows=rows) if variant != "nodes" and variant != "auto" else contextlib.nullcontext()
                if variant == "auto":
                    A.Attention.beats_vendor_products = orig
                with ctx:
                    plan = load(data).compile([dl.device("cuda:0")])
                    out = plan.run_numpy(feeds)
                    items, graph_ms = item_times(plan, 5)
                out = list(out.values())[0] if isinstance(out, dict) else out[0]
                out = np.asarray(out, np.float64)
                if ref is None:
                    ref = out
                err = float(np.max(np.abs(out - ref)) / max(1.0, np.max(np.abs(ref))))
                att = [ms for _, op, ms in items if op == "attention"]
                print(f"{arch} {dtype} b{batch} {variant:5s} graph {graph_ms:.3f} ms  items {len(items)}  "
                      f"attention {len(att)} x {np.mean(att) if att else 0:.4f} ms  diff vs nodes {err:.1e}", flush=True)
                plan.release() if hasattr(plan, "release") else None
A.Attention.beats_vendor_products = orig

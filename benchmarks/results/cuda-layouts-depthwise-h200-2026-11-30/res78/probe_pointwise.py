"""Pointwise chains of ConvNeXt-T and EfficientNet-B0 (float16, batch 16) as recorded plan items on cuda:0: GPU ms
of devicelayer's fused kernel, of a plain add of the same tensors, and of PyTorch (eager and torch.compile) doing
the same; bytes moved / ms as a bandwidth."""
import numpy as np, torch
import devicelayer as dl
from benchmarks.cuda_item_times import item_times
dev = dl.device("cuda:0")
rng = np.random.default_rng(0)


def ours(build, shapes, dt=np.float16):
    g = dl.Graph()
    ins = [g.input(f"i{k}", s, dt) for k, s in enumerate(shapes)]
    g.output("y", build(g, *ins))
    plan = g.compile([dev])
    plan(**{f"i{k}": rng.standard_normal(s).astype(dt) for k, s in enumerate(shapes)})
    rows, graph_ms = item_times(plan, 10)
    return sum(ms for _, _, ms in rows), [r[0][-50:] for r in rows]


def theirs(fn, shapes):
    xs = [torch.randn(s, device="cuda", dtype=torch.float16) for s in shapes]
    out = {}
    for name, f in (("eager", fn), ("compiled", torch.compile(fn))):
        for _ in range(3):
            f(*xs)
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(50):
            f(*xs)
        e.record(); torch.cuda.synchronize()
        out[name] = s.elapsed_time(e) / 50
    return out


S2 = np.float16(np.sqrt(2))
cases = {
    "gelu(x + b) (16,56,56,384)": ((16, 56, 56, 384), (384,),
        lambda g, x, b: (lambda h: g.mul(g.mul(h, g.add(g.erf(g.div(h, g.constant(S2))), g.constant(np.float16(1)))), g.constant(np.float16(0.5))))(g.add(x, b)),
        lambda x, b: torch.nn.functional.gelu(x + b)),
    "x + b (16,56,56,384)": ((16, 56, 56, 384), (384,), lambda g, x, b: g.add(x, b), lambda x, b: x + b),
    "silu(x) (16,96,112,112)": ((16, 96, 112, 112), None, lambda g, x: g.mul(x, g.sigmoid(x)),
        lambda x: torch.nn.functional.silu(x)),
    "x * gate (16,96,112,112)x(16,96,1,1)": ((16, 96, 112, 112), (16, 96, 1, 1), lambda g, x, s: g.mul(x, g.sigmoid(s)),
        lambda x, s: x * torch.sigmoid(s)),
}
for name, (a, b, build, fn) in cases.items():
    shapes = [a] + ([b] if b else [])
    ms, items = ours(build, shapes)
    t = theirs(fn, shapes)
    nbytes = 2 * 2 * int(np.prod(a))
    print(f"{name}: devicelayer {ms:.4f} ms ({nbytes / ms / 1e9:.0f} GB/s) {items}; torch eager {t['eager']:.4f} "
          f"compiled {t['compiled']:.4f} ms", flush=True)

"""ResNet-50's convolutions (float16, batch 16) on cuda:0, GPU ms per call: cuDNN with NCHW activations and filters,
NHWC activations with NCHW filters (the current channels-last route), NHWC activations and NHWC filters (fused
epilogue and apart), and the 1x1 ones as one cuBLASLt product over NHWC rows with the epilogue fused.
python3 .gpu/probe_nhwc.py [float16|float32] [batch]"""
import sys, math, numpy as np, cupy, torch, torchvision
import devicelayer as dl
from backends.cuda import dnn as D
from backends.cuda.timing import gpu_ms
from backends.cuda.conv import epilogue as conv_epilogue

dtype = np.dtype(sys.argv[1] if len(sys.argv) > 1 else "float16")
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 16
m = torchvision.models.resnet50()
geoms = []
def hook(mod, inp, out):
    geoms.append((tuple(inp[0].shape), tuple(mod.weight.shape), mod.stride, mod.padding, tuple(out.shape), mod._name))
for name, mod in m.named_modules():
    if isinstance(mod, torch.nn.Conv2d):
        mod._name = name
        mod.register_forward_hook(hook)
with torch.no_grad():
    m(torch.randn(batch, 3, 224, 224))
seen = {}
for g in geoms:
    key = g[:5] + (g[5].endswith("conv3"),)
    seen.setdefault(key, []).append(g[5])
dev = dl.device("cuda:0")
dnn, lt = dev._dnn(), dev._lt()
tot = {}
with dev.cu_device, cupy.cuda.using_allocator(dev.pool.cupy_pool.malloc):
    stream = cupy.cuda.Stream(non_blocking=True)
    ws = cupy.empty(D.WORKSPACE_LIMIT, np.uint8)
    print(f"{'layer':34s} {'n':>2s} {'x':>18s} {'w':>16s} s  | nchw   nhwc/w-nchw  nhwc/w-nhwc(fused, apart)  lt-gemm", flush=True)
    for (xs, wsh, st, pd, ys, summand), names in seen.items():
        rng = cupy.random.default_rng(0)
        x = rng.standard_normal(xs, dtype=np.float32).astype(dtype)
        w = (rng.standard_normal(wsh, dtype=np.float32) * 0.05).astype(dtype)
        b = rng.standard_normal((wsh[0],), dtype=np.float32).astype(dtype)
        y = cupy.empty(ys, dtype)
        z = rng.standard_normal(ys, dtype=np.float32).astype(dtype) if summand else None
        zp = z.data.ptr if summand else 0
        row = {}
        y_ref = None
        for label, lasts in (("nchw", (False, False, False)), ("nhwc/wnchw", (True, False, True)), ("nhwc", (True, True, True))):
            try:
                layer = dnn.layer(dtype, xs, wsh, ys, pd, st, (1, 1), 1, True, True, summand, lasts)
                with stream:
                    dnn.find(layer, stream.ptr, x.data.ptr, w.data.ptr, y.data.ptr, ws.data.ptr, ws.nbytes)
                    def run():
                        with stream:
                            if not dnn.forward(layer, stream.ptr, x.data.ptr, w.data.ptr, b.data.ptr, y.data.ptr, ws.data.ptr, zp):
                                pass  # (the epilogue pass is timed apart below)
                    t_f = gpu_ms(stream, run)
                    fused = layer.fused
                    layer.fused = False
                    t_a = gpu_ms(stream, run)
                    layer.fused = fused
                    row[label] = (t_f if fused else None, t_a, layer.algo)
                    if label == "nhwc" and fused:
                        run(); stream.synchronize(); y_ref = y.copy()
            except Exception as exc:
                row[label] = (None, None, str(exc)[:40])
        # the epilogue pass alone (what 'apart' adds)
        ep = cupy.ElementwiseKernel("raw T b, raw T z, int32 M, int32 hz", "T y",
                                    "T v = y + b[i % M]; if (hz) v = v + z[i]; y = v > (T)0 ? v : (T)0;", "probe_ep")
        t_ep = gpu_ms(stream, lambda: ep(b, z if summand else y, np.int32(wsh[0]), np.int32(summand), y))
        t_lt = None
        if wsh[2:] == (1, 1) and st == (1, 1):
            NP, C, M = xs[0] * xs[2] * xs[3], wsh[1], wsh[0]
            prod = lt.product(dtype, False, True, NP, M, C, bias=True, summand=bool(summand), activation="relu")
            best = None
            for i in range(len(prod.candidates)):
                def call(i=i):
                    if not prod.run(stream.ptr, x.data.ptr, w.data.ptr, y.data.ptr, b.data.ptr, i, 1.0, zp, 1.0):
                        raise RuntimeError("refused")
                try:
                    t = gpu_ms(stream, call)
                    best = t if best is None else min(best, t)
                except Exception:
                    pass
            t_lt = best
            if best is not None and y_ref is not None:
                y.fill(0); call(0); stream.synchronize()
                print(f"   lt vs cuDNN NHWC: max diff {float(cupy.max(cupy.abs(y.astype(np.float32) - y_ref.astype(np.float32)))):.3g}")
        n = len(names)
        f = lambda v: f"{v:.4f}" if isinstance(v, float) else "  -   "
        nc, nw, nh = row["nchw"], row["nhwc/wnchw"], row["nhwc"]
        best_nchw = min(v for v in (nc[0], (nc[1] or 1e9) + t_ep) if v is not None)
        best_nhwc = min(v for v in (nh[0], (nh[1] or 1e9) + t_ep, (t_lt or 1e9)) if v is not None)
        tot["nchw"] = tot.get("nchw", 0) + n * best_nchw
        tot["nhwc"] = tot.get("nhwc", 0) + n * best_nhwc
        print(f"{names[0][:34]:34s} {n:2d} {str(xs):>18s} {str(wsh):>16s} {st[0]} | {f(nc[0])}/{f(nc[1])} "
              f"{f(nw[0])}/{f(nw[1])}  {f(nh[0])}/{f(nh[1])} a{nh[2]}  {f(t_lt)}  ep {t_ep:.4f}", flush=True)
print("sum over the network, best per layer (apart = conv + epilogue pass):", {k: round(v, 3) for k, v in tot.items()})

"""Where a warm process's start goes: phases, and each cuDNN adopt / cuBLAS gemm / nvrtc compile call timed."""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import devicelayer as dl
from devicelayer.onnx import load
import devicelayer.backends.cuda.dnn as D
import devicelayer.backends.cuda.blas as B
import traceback
t1 = time.perf_counter()
rec = []
def wrap(cls, name, desc):
    orig = getattr(cls, name)
    def f(self, *a, **k):
        t = time.perf_counter(); r = orig(self, *a, **k)
        rec.append((name, round((time.perf_counter() - t) * 1e3, 2), round((t - t0) * 1e3, 1), desc(a)))
        return r
    setattr(cls, name, f)
wrap(D.Dnn, "adopt", lambda a: f"algo {a[1]} fused {a[0].fused}")
wrap(D.Dnn, "forward", lambda a: f"algo {a[0]._pick}")
wrap(D.Dnn, "__init__", lambda a: "handle")
wrap(D.Dnn, "layer", lambda a: "")
wrap(D._Layer, "__init__", lambda a: "descriptors")
_lib = D.library
def _library():
    t = time.perf_counter(); r = _lib(); rec.append(("cudnn library", round((time.perf_counter() - t) * 1e3, 2), round((t - t0) * 1e3, 1), "")); return r
D.library = _library
wrap(B.Blas if hasattr(B, "Blas") else next(v for v in vars(B).values() if isinstance(v, type) and hasattr(v, "gemm")), "gemm", lambda a: str(a[1:7]))
try:
    import cupy_backends.cuda.libs.nvrtc as N
    o = N.compileProgram
    def cp(*a, **k):
        t = time.perf_counter(); r = o(*a, **k); rec.append(("nvrtc", round((time.perf_counter() - t) * 1e3, 2), round((t - t0) * 1e3, 1), " | ".join(f"{f.name}:{f.lineno}" for f in traceback.extract_stack()[-14:-1]))); return r
    N.compileProgram = cp
except Exception as e:
    print("no nvrtc hook", e)
path, feeds_path = sys.argv[1], sys.argv[2]
feeds = dict(np.load(feeds_path))
dev = dl.device("cuda:0"); t2 = time.perf_counter()
graph = load(path); t3 = time.perf_counter()
plan = graph.compile([dev]); t4 = time.perf_counter()
out = plan.run_numpy(feeds); t5 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "device": t2 - t1, "load": t3 - t2, "compile": t4 - t3, "first_run": t5 - t4}))
for r in rec:
    print(*r, sep="\t")

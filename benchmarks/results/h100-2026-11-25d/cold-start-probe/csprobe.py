"""Cold-start probes on CUDA: where the start's time goes (init overlap, first cuBLAS calls)."""
import ctypes
import json
import os
import sys
import threading
import time

T0 = time.perf_counter()
marks = []


def mark(what):
    marks.append((what, round(time.perf_counter() - T0, 4)))


def early():
    t = time.perf_counter()
    lib = ctypes.CDLL("libcuda.so.1")
    r = lib.cuInit(0)
    n = ctypes.c_int()
    lib.cuDeviceGetCount(ctypes.byref(n))
    t1 = time.perf_counter()
    for i in range(n.value):
        d = ctypes.c_int()
        lib.cuDeviceGet(ctypes.byref(d), i)
        ctx = ctypes.c_void_p()
        lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), d)
    marks.append(("early-thread cuInit %d (%.4f) ctx (%.4f)" % (r, t1 - t, time.perf_counter() - t1),
                  round(time.perf_counter() - T0, 4)))


SHAPES = [(64, 12544, 147), (64, 3136, 64), (64, 3136, 576), (256, 3136, 64), (256, 3136, 64), (64, 3136, 256),
          (64, 3136, 576), (256, 3136, 64), (64, 3136, 256), (64, 3136, 576), (256, 3136, 64), (128, 3136, 256),
          (128, 784, 1152), (512, 784, 128), (512, 784, 256), (128, 784, 512), (128, 784, 1152), (512, 784, 128),
          (128, 784, 512), (128, 784, 1152), (512, 784, 128), (128, 784, 512), (128, 784, 1152), (512, 784, 128),
          (256, 784, 512), (256, 196, 2304), (1024, 196, 256), (1024, 196, 512), (256, 196, 1024),
          (256, 196, 2304), (1024, 196, 256), (256, 196, 1024), (256, 196, 2304), (1024, 196, 256),
          (256, 196, 1024), (256, 196, 2304), (1024, 196, 256), (256, 196, 1024), (256, 196, 2304),
          (1024, 196, 256), (256, 196, 1024), (256, 196, 2304), (1024, 196, 256), (512, 196, 1024),
          (512, 49, 4608), (2048, 49, 512), (2048, 49, 1024), (512, 49, 2048), (512, 49, 4608), (2048, 49, 512),
          (512, 49, 2048), (512, 49, 4608), (2048, 49, 512)]


def gemm_mode(variant):
    import numpy as np
    mark("start")
    import cupy
    mark("cupy imported")
    cupy.cuda.runtime.getDeviceCount()
    s = cupy.cuda.Stream(non_blocking=True)
    mark("stream")
    from devicelayer.backends.cuda import blas as B
    ws = cupy.empty(B.WORKSPACE, np.uint8)
    b = B.Blas(B.library(), ws.data)
    mark("blas")
    a = cupy.ones(1 << 24, np.float32)
    c = cupy.zeros(1 << 24, np.float32)
    s.synchronize()
    res = {}
    passes = []
    for p in range(2):
        times = []
        if variant == "capture":
            s.begin_capture(cupy.cuda.runtime.streamCaptureModeRelaxed)
        for (m, n, k) in SHAPES:
            t = time.perf_counter()
            b.gemm(s.ptr, np.dtype(np.float32), False, False, m, n, k, 1.0, a.data.ptr, k, 0, a.data.ptr, n, 0, 0.0,
                   c.data.ptr, n, 0, 1)
            if variant != "capture":
                s.synchronize()
            times.append(round((time.perf_counter() - t) * 1e3, 3))
        if variant == "capture":
            t = time.perf_counter()
            g = s.end_capture()
            g.upload(s)
            g.launch(s)
            s.synchronize()
            times.append(("end+upload+launch", round((time.perf_counter() - t) * 1e3, 3)))
        mark(f"pass {p}")
        passes.append(times)
    res["passes"] = passes
    res["sum_ms"] = [round(sum(x for x in t if isinstance(x, float)), 2) for t in passes]
    return res


def prewarm():
    import cupy
    import numpy as np
    from devicelayer.backends.cuda import blas as B
    t = time.perf_counter()
    with cupy.cuda.Device(0):
        s = cupy.cuda.Stream(non_blocking=True)
        ws = cupy.empty(B.WORKSPACE, np.uint8)
        b = B.Blas(B.library(), ws.data)
        a = cupy.empty(1 << 24, np.float32)
        c = cupy.empty(1 << 24, np.float32)
        for (m, n, k) in sorted(set(SHAPES)):
            b.gemm(s.ptr, np.dtype(np.float32), False, False, m, n, k, 1.0, a.data.ptr, k, 0, a.data.ptr, n, 0, 0.0,
                   c.data.ptr, n, 0, 1)
        s.synchronize()
    marks.append(("prewarm done in %.4f" % (time.perf_counter() - t), round(time.perf_counter() - T0, 4)))


def init_mode(variant):
    if variant == "early":
        th = threading.Thread(target=early, daemon=True)
        th.start()
    mark("start")
    import cupy
    mark("cupy imported")
    n = cupy.cuda.runtime.getDeviceCount()
    mark(f"getDeviceCount {n}")
    s = cupy.cuda.Stream(non_blocking=True)
    mark("stream (context)")
    cupy.cuda.runtime.deviceSynchronize()
    mark("synced")
    return {}


def run_mode(variant, model, feeds_path):
    import numpy as np
    if variant == "early":
        th = threading.Thread(target=early, daemon=True)
    mark("start")
    import devicelayer as dl
    from devicelayer.onnx import load
    mark("import")
    feeds = dict(np.load(feeds_path))
    if variant == "early":
        th.start()
    dev = dl.device("cuda:0")
    mark("device")
    if variant == "prewarm":
        pw = threading.Thread(target=prewarm, daemon=True)
        pw.start()
    from devicelayer.backends.cuda import blas as B
    calls = []
    orig = B.Blas.gemm

    def timed(self, *args, **kw):
        t = time.perf_counter()
        orig(self, *args, **kw)
        calls.append((args[4], args[5], args[6], args[18] if len(args) > 18 else None,
                      round((time.perf_counter() - t) * 1e3, 3)))
    B.Blas.gemm = timed
    graph = load(model)
    mark("load")
    plan = graph.compile([dev])
    mark("compile")
    first = len(calls)
    out = plan.run_numpy(feeds)
    mark("first run")
    run_calls = calls[first:]
    plan.run_numpy(feeds)
    mark("second run")
    second = len(calls)
    graph2 = load(model)
    plan2 = graph2.compile([dev])
    mark("load+compile again")
    plan2.run_numpy(feeds)
    mark("first run of a second plan")
    run_calls2 = calls[second:]
    return {"compile_gemm_calls": calls[:first], "first_run_gemm_calls": run_calls,
            "first_run_gemm_ms": round(sum(c[-1] for c in run_calls), 2),
            "second_plan_gemm_ms": round(sum(c[-1] for c in run_calls2), 2), "second_plan_calls": len(run_calls2)}


if __name__ == "__main__":
    mode, variant = sys.argv[1], sys.argv[2]
    if mode == "gemm":
        r = gemm_mode(variant)
    elif mode == "init":
        r = init_mode(variant)
    else:
        r = run_mode(variant, sys.argv[3], sys.argv[4])
    mark("end")
    r["marks"] = marks
    r["mode"], r["variant"] = mode, variant
    r["env"] = {k: v for k, v in os.environ.items() if k.startswith("CUDA_")}
    print("RESULT " + json.dumps(r))

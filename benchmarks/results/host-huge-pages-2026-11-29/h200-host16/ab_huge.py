"""In one process: the same model compiled twice, huge-page blocks on and off (env read at allocation), runs
alternating in blocks with onnxruntime beside."""
import os, sys, time, statistics, numpy as np, onnx, onnxruntime as ort
sys.path.insert(0, "/work/main")
import devicelayer.onnx as dlo
from benchmarks.host_vs_onnxruntime import random_feeds
for path in sys.argv[1:]:
    model = onnx.load(path); feeds = random_feeds(model, 0)
    os.environ["DEVICELAYER_HUGE_PAGES"] = "1"
    on = dlo.load(path).compile(["host"]); on.run_numpy(feeds)
    os.environ["DEVICELAYER_HUGE_PAGES"] = "0"
    off = dlo.load(path).compile(["host"]); off.run_numpy(feeds)
    so = ort.SessionOptions(); so.intra_op_num_threads = len(os.sched_getaffinity(0))
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    def blk(fn, n):
        t0 = time.perf_counter()
        for _ in range(n): fn()
        return (time.perf_counter() - t0) / n * 1e3
    once = blk(lambda: off.run_numpy(feeds), 1); n = max(3, int(0.3 / (once / 1e3)))
    res = {"on": [], "off": [], "ort": []}
    for r in range(8):
        for k, fn in ([("on", lambda: on.run_numpy(feeds)), ("off", lambda: off.run_numpy(feeds)), ("ort", lambda: s.run(None, feeds))] if r % 2 == 0 else
                      [("ort", lambda: s.run(None, feeds)), ("off", lambda: off.run_numpy(feeds)), ("on", lambda: on.run_numpy(feeds))]):
            res[k].append(blk(fn, n))
    faster = sum(a < b for a, b in zip(res["on"], res["off"]))
    m = {k: statistics.median(v) for k, v in res.items()}
    print(f"{path.split('/')[-1]:22s} on {m['on']:7.2f} off {m['off']:7.2f} ort {m['ort']:7.2f} ms | on/ort {m['on']/m['ort']:.2f} off/ort {m['off']/m['ort']:.2f} | on faster in {faster}/8", flush=True)
    on.release(); off.release()

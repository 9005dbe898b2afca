import sys, time, numpy as np, onnx, onnxruntime as ort
sys.path.insert(0, "/work/main")
import devicelayer.onnx as dlo
from devicelayer.graph import epilogues as E
from benchmarks.host_vs_onnxruntime import random_feeds
orig = E._vendor_fuses
rounds = int(sys.argv[1])
for path in sys.argv[2:]:
    model = onnx.load(path); feeds = random_feeds(model, 0)
    E._vendor_fuses = lambda *a, **k: False
    before = dlo.load(model).compile(["host"])
    E._vendor_fuses = orig
    after = dlo.load(model).compile(["host"])
    so = ort.SessionOptions(); so.intra_op_num_threads = 2; so.inter_op_num_threads = 1
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    want = s.run(None, feeds)
    errs = []
    for p in (before, after):
        got = p.run_numpy(feeds)
        errs.append(max(float(np.max(np.abs(g - w)) / (np.max(np.abs(w)) + 1e-30)) for g, w in zip(got.values(), want)))
    def tm(fn, n=10):
        fn(); ts=[]
        for _ in range(n):
            t0=time.perf_counter(); fn(); ts.append(time.perf_counter()-t0)
        return np.median(ts)*1e3
    b, a, o = [], [], []
    for r in range(rounds):
        order = [(b, before), (a, after)] if r % 2 == 0 else [(a, after), (b, before)]
        for lst, p in order:
            lst.append(tm(lambda: p.run_numpy(feeds)))
        o.append(tm(lambda: s.run(None, feeds)))
    wins = sum(x < y for x, y in zip(a, b))
    b, a, o = map(np.median, (b, a, o))
    print(f"{path.split('/')[-1]:24s} err {errs[0]:.1e}/{errs[1]:.1e}  before {b:8.2f}  after {a:8.2f}  ort {o:8.2f} ms  ratio {b/o:.2f} -> {a/o:.2f}  after faster in {wins}/{rounds}", flush=True)
    before.release(); after.release()

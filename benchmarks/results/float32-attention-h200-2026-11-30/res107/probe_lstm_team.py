import sys, time, numpy as np
sys.path.insert(0, ".")
import devicelayer as dl
dev = dl.device("host") if hasattr(dl, "device") else None
from backends.host import dnnl as hd, omp as ho
from backends.host.rnn_layer import RnnLayer, Geometry
lib = hd.library()
T,N,I,H = 64,1,128,32
def mk(d, rev):
    g = Geometry("lstm", T, N, I, H, d, rev, False, False, False, False)
    return ho.alone(lib, lambda: RnnLayer(g))()
rng = np.random.default_rng(0)
def wts(layer, d):
    w = rng.standard_normal((d, 4*H, I)).astype(np.float32); r = rng.standard_normal((d,4*H,H)).astype(np.float32)
    b = rng.standard_normal((d, 8*H)).astype(np.float32)
    return ho.alone(lib, lambda: layer.prepare(w, r, b, None))(), (w, r, b)
x = rng.standard_normal((T,N,I)).astype(np.float32)
bi = mk(2, False); wb, raw = wts(bi, 2)
yb = np.empty((T,2,N,H), np.float32); hb = np.empty((2,N,H), np.float32)
callb = ho.alone(lib, bi.bind(x.ctypes.data, 0, 0, wb, yb.ctypes.data, hb.ctypes.data, 0, keep=None))
fw = mk(1, False); rv = mk(1, True)
w, r, b = raw
wf = ho.alone(lib, lambda: fw.prepare(w[:1], r[:1], b[:1], None))()
wr = ho.alone(lib, lambda: rv.prepare(w[1:], r[1:], b[1:], None))()
yf = np.empty((T,1,N,H), np.float32); yr = np.empty((T,1,N,H), np.float32); hf = np.empty((1,N,H), np.float32); hr = np.empty((1,N,H), np.float32)
cf = fw.bind(x.ctypes.data, 0,0, wf, yf.ctypes.data, hf.ctypes.data, 0, keep=None)
cr = rv.bind(x.ctypes.data, 0,0, wr, yr.ctypes.data, hr.ctypes.data, 0, keep=None)
calls = (cf, cr)
def team():
    ho.in_team(lib, lambda i, n: calls[i]() if i < 2 else None, 2)
def serial():
    ho.alone(lib, cf)(); ho.alone(lib, cr)()
for f in (callb, team, serial): f()
team(); callb()
print("diff", np.abs(yb[:,0]-yf[:,0]).max(), np.abs(yb[:,1]-yr[:,0]).max())
def blk(f, n=3000):
    t=time.perf_counter()
    for _ in range(n): f()
    return (time.perf_counter()-t)/n*1e6
for r_ in range(3):
    print("bi %.1f team %.1f serial %.1f" % (blk(callb), blk(team), blk(serial)))
import threading
def probe(i, n):
    t0 = time.perf_counter(); calls[i]() ; t1 = time.perf_counter()
    return (i, n, threading.get_ident(), t0, t1)
for _ in range(3):
    res = ho.in_team(lib, probe, 2)
    base = min(r[3] for r in res)
    print([(i, n, round((a-base)*1e6,1), round((b-base)*1e6,1)) for i,n,_,a,b in res])
print(lib)

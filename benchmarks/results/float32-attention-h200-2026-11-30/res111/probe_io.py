"""Where a CUDA plan's end-to-end time goes for a model with large inputs and outputs: host copies, DMA, the
graph, and what overlapping them in pieces would save (raw CuPy calls on the same sizes)."""
import statistics, sys, time
import numpy as np
import cupy
import devicelayer as dl
from devicelayer.onnx import load
from benchmarks import cuda_item_times as cit

arch, dtype, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
class A: model = None
A.arch, A.dtype, A.batch = arch, dtype, batch
data, feeds = cit._model(A)
dev = dl.device("cuda:0")
plan = load(data).compile([dev])
out = plan.run_numpy(feeds)
def med(f, n=40):
    f(); f()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); f(); ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)
print(f"{arch} {dtype} b{batch}: inputs", {k: (v.shape, v.nbytes) for k, v in feeds.items()},
      "outputs", {k: (v.shape, v.nbytes) for k, v in out.items()})
print("run_numpy ms", round(med(lambda: plan.run_numpy(feeds)), 3))
dev_in = {k: dl.tensor(v, dev) for k, v in feeds.items()}
def on_device():
    res = plan.run(dev_in)
    for t in res.values():
        t.ready.wait()
        t.device.pool.free(t.buffer)
print("run (device tensors in and out) ms", round(med(on_device), 3))
x = next(iter(feeds.values())); y = next(iter(out.values()))
pin_x = cupy.cuda.alloc_pinned_memory(x.nbytes); sx = np.frombuffer(pin_x, x.dtype, x.size).reshape(x.shape)
pin_y = cupy.cuda.alloc_pinned_memory(y.nbytes); sy = np.frombuffer(pin_y, y.dtype, y.size).reshape(y.shape)
dx = cupy.empty(x.shape, x.dtype); dy = cupy.asarray(y)
st = cupy.cuda.Stream(non_blocking=True)
print("copy input into pinned ms", round(med(lambda: np.copyto(sx, x)), 3))
print("copy output from pinned into a new array ms", round(med(lambda: np.copyto(np.empty_like(y), sy)), 3))
print("copy output from pinned into a reused array ms", round(med(lambda: np.copyto(y, sy)), 3))
def h2d():
    dx.set(sx, stream=st); st.synchronize()
def d2h():
    dy.get(stream=st, out=sy); st.synchronize()
print("DMA in (pinned) ms", round(med(h2d), 3), " DMA out (pinned) ms", round(med(d2h), 3))
print("pageable H2D cupy.asarray ms", round(med(lambda: cupy.asarray(x)), 3), " pageable D2H asnumpy ms", round(med(lambda: cupy.asnumpy(dy)), 3))
def serial_in():
    np.copyto(sx, x); dx.set(sx, stream=st); st.synchronize()
def piped_in(k=4):
    fx, fs = x.reshape(-1), sx.reshape(-1); dflat = dx.reshape(-1)
    b = [fx.size * i // k for i in range(k + 1)]
    for a, e in zip(b, b[1:]):
        np.copyto(fs[a:e], fx[a:e]); dflat[a:e].set(fs[a:e], stream=st)
    st.synchronize()
def serial_out():
    dy.get(stream=st, out=sy); st.synchronize(); o = np.empty_like(y); np.copyto(o, sy)
def piped_out(k=4):
    fy = sy.reshape(-1); dflat = dy.reshape(-1); o = np.empty_like(y); fo = o.reshape(-1)
    b = [fy.size * i // k for i in range(k + 1)]
    evs = []
    for a, e in zip(b, b[1:]):
        dflat[a:e].get(stream=st, out=fy[a:e]); ev = cupy.cuda.Event(); ev.record(st); evs.append(ev)
    for (a, e), ev in zip(zip(b, b[1:]), evs):
        ev.synchronize(); np.copyto(fo[a:e], fy[a:e])
for k in (2, 4, 8):
    print(f"in: serial {med(serial_in):.3f} piped/{k} {med(lambda: piped_in(k)):.3f} | out: serial {med(serial_out):.3f} piped/{k} {med(lambda: piped_out(k)):.3f}")

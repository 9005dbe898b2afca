"""PoCL 5.0 (opencl:1): eager convs with epilogues, poisoned outputs, many times; mode A as is, B launches waiting
on their events explicitly, C uploads waited for before the launch."""
import sys, time
import numpy as np
import devicelayer as dl
from devicelayer import tensor
from devicelayer.kernels.runner import run
from devicelayer.ops import names  # noqa
from devicelayer.kernels.op import get
sys.path.insert(0, "tests")
from test_fusion import _CONV_PATHS, _CONV_ACTIVATIONS
mode, n, dev_id = sys.argv[1], int(sys.argv[2]), sys.argv[3]
dev = dl.device(dev_id)
if mode == "B":
    import pyopencl as cl
    from devicelayer.backends import opencl as bo
    from devicelayer.device import Program
    def _launch(self, program, args, global_size, local_size, waits):
        kernel = program.handle[1]
        values = [self._mem(a) if isinstance(a, dl.Buffer) else a for a in args]
        with program.lock:
            kernel.set_args(*values)
            native = cl.enqueue_nd_range_kernel(self.queue, kernel, global_size, local_size,
                                                wait_for=[w.native for w in waits if isinstance(w, bo.OpenCLEvent)] or None)
        return bo.OpenCLEvent(program.label, self, native)
    bo.OpenCLDevice._launch = _launch
op = get("conv")
rng = np.random.default_rng(int(time.time()))
bad = 0
paths = sorted(_CONV_PATHS)
t0 = time.time()
for it in range(n):
    path = paths[it % len(paths)]; act = (it // len(paths)) % len(_CONV_ACTIVATIONS); summand = bool((it // 32) % 2)
    xs, ws, extra = _CONV_PATHS[path]
    attrs = {**extra, **_CONV_ACTIVATIONS[act]}
    arrays = [rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32),
              rng.standard_normal(ws[0]).astype(np.float32)]
    types = [dl.TensorType.of(a.shape, a.dtype) for a in arrays] if hasattr(dl, "TensorType") else None
    from devicelayer.kernels.op import TensorType
    types = [TensorType.of(a.shape, a.dtype) for a in arrays]
    checked, outs = op.prepare(types, dict(attrs))
    if summand:
        arrays.append(rng.standard_normal(outs[0].shape).astype(np.float32)); types.append(outs[0])
        checked, outs = op.prepare(types, dict(attrs))
    want = op.reference([a.astype(np.float64) for a in arrays], checked)[0]
    if mode == "D":
        pad = dev.pool.allocate(int(rng.integers(1, 64)) * 4096 + int(rng.integers(0, 64)) * 64, np.uint8)
    ts = [tensor(a, dev) for a in arrays]
    poisoned = tensor(np.full(outs[0].shape, np.nan, np.float32), dev)
    if mode == "C":
        for t in ts + [poisoned]:
            t.ready.wait()
    got = run("conv", ts, out=poisoned, **attrs)[0].numpy()
    scale = max(1.0, float(np.max(np.abs(want))))
    wrong = np.abs(got - want) > 2e-4 * np.abs(want) + 2e-4 * scale
    if np.isnan(got).any() or wrong.any():
        bad += 1
        idx = np.argwhere(wrong | np.isnan(got))
        extra_info = ""
        if path == "1d":
            alt = [a.copy() for a in arrays]
            alt[0][1] = alt[0][0]
            alt_want = op.reference([a.astype(np.float64) for a in alt], checked)[0]
            extra_info = f" image1==conv(image0 input): {np.allclose(got[1], alt_want[1], rtol=1e-3, atol=1e-3)}"
        print(f"mode {mode}{extra_info} it {it} {path} act {act} summand {summand}: {len(idx)}/{got.size} wrong, first {idx[0].tolist()}, nan {int(np.isnan(got).sum())}", flush=True)
    for t in ts + [poisoned]:
        dev.pool.free(t.buffer)
    if mode == "D":
        dev.pool.free(pad)
print(f"mode {mode} {dev_id}: {bad} of {n} wrong in {time.time() - t0:.1f} s", flush=True)

"""Host -> device upload and device -> host download of ResNet-50's batch-16 input (9.6 MB) and a small output on each
device, against torch's .cuda() / .cpu() in the same process: median ms of 30 each."""
import statistics
import sys
import time

import numpy as np
import torch

import devicelayer as dl


def med(fn, n=30):
    fn()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


x = np.random.default_rng(0).standard_normal((16, 3, 224, 224)).astype(np.float32)
y = np.empty((16, 1000), np.float32)
tx = torch.from_numpy(x)
print(f"torch: up {med(lambda: tx.cuda()):.3f} ms, down {med(lambda: torch.cuda.FloatTensor(16, 1000).cpu()):.3f}", flush=True)
for name in sys.argv[1:]:
    dev = dl.device(name)
    bx = dev.pool.allocate(x.nbytes, x.dtype)
    by = dev.pool.allocate(y.nbytes, y.dtype)
    up = med(lambda: dev.pool.upload(bx, x).wait())
    down = med(lambda: dev.pool.download(by, y).wait())
    dev.pool.free(bx)
    dev.pool.free(by)
    print(f"{name}: up {up:.3f} ms, down {down:.3f}", flush=True)

# ResNet-50 b16 float32 with host inputs and outputs (run_numpy) and with a device-resident input, output left there
if True:
    from benchmarks import gpu_vs_torch as g
    from devicelayer.onnx import load
    from devicelayer.tensors import tensor
    module, example, names = g._arch("resnet50").build()
    example = g._batched(example, 16, torch)
    with torch.no_grad():
        model_bytes = g._export(module.cuda().eval(), tuple(e.cuda() for e in example), names)
    feeds = dict(zip(names, [e.numpy() for e in example]))
    for name in [a for a in sys.argv[1:] if not a.startswith("--")]:
        dev = dl.device(name)
        plan = load(model_bytes).compile([dev])
        plan.run_numpy(feeds)
        resident = {k: tensor(v, dev) for k, v in feeds.items()}

        def on_device():
            out = plan.run(resident)
            dev.synchronize()
            return out
        on_device()
        a = med(lambda: plan.run_numpy(feeds), 40)
        b = med(on_device, 40)
        print(f"{name} resnet50 b16: run_numpy {a:.3f} ms, device-resident run {b:.3f} ms", flush=True)
        plan.release()

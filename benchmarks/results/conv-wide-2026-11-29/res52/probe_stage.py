"""The pieces of a staged upload of ResNet-50's batch-16 input (9.6 MB) on each device: NumPy's copy and the split
copy into the device's host array, the DMA from that host array alone, and pool.upload from ordinary memory;
median ms of 30."""
import statistics
import sys
import time

import numpy as np

import devicelayer as dl
from devicelayer.hostcopy import copy_into


def med(fn, n=30):
    fn()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


x = np.random.default_rng(0).standard_normal((16, 3, 224, 224)).astype(np.float32)
plain = np.empty_like(x)
print(f"host: np.copyto {med(lambda: np.copyto(plain, x)):.3f} ms, copy_into {med(lambda: copy_into(plain, x)):.3f}",
      flush=True)
for name in sys.argv[1:]:
    dev = dl.device(name)
    buf = dev.pool.allocate(x.nbytes, x.dtype)
    stage = dev.pool.host_array(x.shape, x.dtype)
    a = med(lambda: np.copyto(stage, x))
    b = med(lambda: copy_into(stage, x))
    c = med(lambda: dev.pool.upload(buf, stage.reshape(-1)).wait())
    d = med(lambda: dev.pool.upload(buf, x.reshape(-1)).wait())
    print(f"{name}: into host array np.copyto {a:.3f} ms, copy_into {b:.3f}; DMA from it {c:.3f}; "
          f"upload from ordinary memory {d:.3f}", flush=True)
    del stage
    dev.pool.free(buf)

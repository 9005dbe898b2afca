"""The host's conv (``conv`` op, ``reference_into``, ReLU fused) on the probe's shapes, median of 30 calls (us)."""
import statistics
import time

import numpy as np

from devicelayer.kernels.op import OPS, TensorType
import devicelayer.kernels.ops  # noqa: F401  (registers the ops)

SHAPES = [(64, 64, 56, 3, 1, 1), (128, 128, 28, 3, 1, 1), (256, 256, 14, 3, 1, 1), (512, 512, 7, 3, 1, 1),
          (256, 64, 56, 1, 1, 0), (64, 256, 56, 1, 1, 0), (512, 128, 28, 1, 1, 0), (1024, 256, 14, 1, 1, 0),
          (2048, 512, 7, 1, 1, 0), (3, 64, 224, 7, 2, 3), (128, 32, 56, 3, 1, 1), (128, 32, 14, 3, 1, 1)]
rng = np.random.default_rng(0)
conv = OPS["conv"]
for C, M, H, k, s, p in SHAPES:
    x = rng.standard_normal((1, C, H, H)).astype(np.float32)
    w = rng.standard_normal((M, C, k, k)).astype(np.float32)
    b = rng.standard_normal(M).astype(np.float32)
    attrs, types = conv.prepare([TensorType.of(a.shape, a.dtype) for a in (x, w, b)],
                                {"strides": [s, s], "pads": [p] * 4, "activation": "relu"})
    y = np.empty(types[0].shape, np.float32)
    times = []
    for i in range(33):
        t0 = time.perf_counter()
        conv.reference_into([x, w, b], [y], attrs)
        if i >= 3:
            times.append(time.perf_counter() - t0)
    print(f"C={C} M={M} H={H} k={k} s={s}: devicelayer host {statistics.median(times) * 1e6:.0f} us")

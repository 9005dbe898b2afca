"""Depthwise convolutions (ConvNeXt-T's 7x7, EfficientNet-B0's 3x3 and 5x5; float16, batch 16) as recorded plan
items on cuda:0: GPU ms of the item (cuDNN, or with DEVICELAYER_CUDNN=0 the op's own kernel)."""
import os, numpy as np
import devicelayer as dl
from benchmarks.cuda_item_times import item_times
dev = dl.device("cuda:0")
rng = np.random.default_rng(0)
for c, s, k, st in ((96, 56, 7, 1), (192, 28, 7, 1), (384, 14, 7, 1), (768, 7, 7, 1), (32, 112, 3, 1), (96, 112, 3, 2),
                    (144, 56, 5, 2), (240, 28, 3, 1), (480, 14, 5, 1), (1152, 7, 3, 1)):
    for dt in (np.float16, np.float32):
        g = dl.Graph()
        x = g.input("x", (16, c, s, s), dt)
        w = g.constant((rng.standard_normal((c, 1, k, k)) / k).astype(dt))
        b = g.constant(rng.standard_normal(c).astype(dt))
        g.output("y", g.conv(x, w, b, pads=[k // 2] * 4, strides=[st, st], group=c))
        plan = g.compile([dev])
        plan(x=rng.standard_normal((16, c, s, s)).astype(dt))
        rows, graph_ms = item_times(plan, 5)
        print(f"cudnn={os.environ.get('DEVICELAYER_CUDNN', 'on'):3s} {np.dtype(dt).name} c{c} {s}x{s} k{k} s{st}: "
              f"{' '.join(f'{ms:.4f}' for _, _, ms in rows)} ms  ({rows[0][0][-60:]})", flush=True)

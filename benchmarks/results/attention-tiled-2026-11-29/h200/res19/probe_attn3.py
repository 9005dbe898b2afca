"""An exported-SDPA attention block (B x H heads x S tokens x 64, boolean key mask) on each GPU device, with the
attention pattern (one attention op: as chosen, forced composed, forced tiled) and without it (its nodes: on cuda:0 cuBLAS's products), both plans otherwise
fused alike, inputs already on the device: ms a run and its wait, alternating blocks (benchmarks.common)."""
import sys
import numpy as np
import devicelayer as dl
from devicelayer.graph import patterns
from devicelayer.kernels.ops import attention as attention_op
from benchmarks.common import alternating_ms
sys.path.insert(0, "tests")
import test_attention_pattern as t

MATCHERS = patterns.MATCHERS
for dev in sys.argv[1:]:
    d = dl.device(dev)
    for batch, heads, seq in ((2, 4, 128), (16, 12, 128), (2, 8, 256), (2, 8, 512), (2, 6, 1500)):
        t.B, t.H, t.D = batch, heads, 64
        g, feeds = t.sdpa_graph(np.random.default_rng(0), True, sq=seq, skv=seq)
        fused = g.compile([d])
        with attention_op.forcing("composed"):
            composed = g.compile([d])
        with attention_op.forcing("tiled"):
            tiled = g.compile([d])
        patterns.MATCHERS = tuple(m for m in MATCHERS if m is not patterns.attention)
        try:
            plain = g.compile([d])
        finally:
            patterns.MATCHERS = MATCHERS
        dev_feeds = {k: dl.tensor(v, d) for k, v in feeds.items()}
        outs = {}

        def runner(name, p):
            def call():
                y = p.run(dev_feeds)["y"]
                y.ready.wait()
                if name in outs:
                    d.pool.free(outs[name].buffer)
                outs[name] = y
            return call

        plans = {"pattern": fused, "composed": composed, "tiled": tiled, "nodes": plain}
        ms = alternating_ms({n: runner(n, p) for n, p in plans.items()}, 5, 0.2)
        diff = max(float(np.max(np.abs(outs[n].numpy() - outs["nodes"].numpy()))) for n in plans)
        cells = ", ".join(f"{n} {ms[n]:.3f} ({ms[n] / ms['nodes']:.2f}, {p.kernel_counts()['after']} kernels)"
                          for n, p in plans.items())
        print(f"{dev} B={batch} H={heads} S={seq}: {cells}; largest difference {diff:.1e}", flush=True)
        for p in plans.values():
            p.release()

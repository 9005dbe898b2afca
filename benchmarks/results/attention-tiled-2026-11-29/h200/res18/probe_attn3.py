"""An exported-SDPA attention block (B x H heads x S tokens x 64, boolean key mask) on each GPU device, with the
attention pattern (one attention op) and without it (its nodes: on cuda:0 cuBLAS's products), both plans otherwise
fused alike, inputs already on the device: ms a run and its wait, alternating blocks (benchmarks.common)."""
import sys
import numpy as np
import devicelayer as dl
from devicelayer.graph import patterns
from benchmarks.common import alternating_ms
sys.path.insert(0, "tests")
import test_attention_pattern as t

MATCHERS = patterns.MATCHERS
for dev in sys.argv[1:]:
    d = dl.device(dev)
    for batch, heads, seq in ((2, 4, 128), (16, 4, 128), (2, 12, 128), (16, 12, 128), (2, 8, 512), (2, 6, 1500)):
        t.B, t.H, t.D = batch, heads, 64
        g, feeds = t.sdpa_graph(np.random.default_rng(0), True, sq=seq, skv=seq)
        fused = g.compile([d])
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

        ms = alternating_ms({"pattern": runner("pattern", fused), "nodes": runner("nodes", plain)}, 5, 0.25)
        diff = float(np.max(np.abs(outs["pattern"].numpy() - outs["nodes"].numpy())))
        print(f"{dev} B={batch} H={heads} S={seq}: pattern {ms['pattern']:.3f} ms, nodes {ms['nodes']:.3f} ms, "
              f"ratio {ms['pattern'] / ms['nodes']:.2f}; kernels {fused.kernel_counts()['after']} vs "
              f"{plain.kernel_counts()['after']}; largest difference {diff:.1e}", flush=True)
        fused.release(); plain.release()

"""Device time of an exported-SDPA attention block (B x H heads x S tokens x 64, boolean key mask) on each GPU
device, with the attention pattern (one attention op: the tiled kernel where it runs) and without it (the nodes:
on cuda:0 cuBLAS's products), both plans otherwise fused alike: us of device time a run (the profile's sum over
nodes, median of 5 profiled runs), the attention op's own, and ms a run from the host."""
import statistics, sys, time
import numpy as np
import devicelayer as dl
from devicelayer.graph import patterns
sys.path.insert(0, "tests")
import test_attention_pattern as t

MATCHERS = patterns.MATCHERS
for dev in sys.argv[1:]:
    d = dl.device(dev)
    for batch, heads, seq in ((2, 4, 128), (16, 4, 128), (2, 12, 128), (16, 12, 128), (2, 8, 512)):
        t.B, t.H, t.D = batch, heads, 64
        g, feeds = t.sdpa_graph(np.random.default_rng(0), True, sq=seq, skv=seq)
        fused = g.compile([d])
        patterns.MATCHERS = tuple(m for m in MATCHERS if m is not patterns.attention)
        try:
            plain = g.compile([d])
        finally:
            patterns.MATCHERS = MATCHERS
        outs = {}
        for name, p in (("pattern", fused), ("nodes", plain)):
            for _ in range(5):
                outs[name] = p(**feeds)["y"]
            t0 = time.perf_counter(); n = 0
            while time.perf_counter() - t0 < 0.4:
                p(**feeds); n += 1
            ms = (time.perf_counter() - t0) / n * 1e3
            tot, att = [], []
            for _ in range(5):
                p.run_numpy(feeds, profile=True)
                prof = p.last_profile
                tot.append(sum(r["device_us"] for r in prof))
                att.append(sum(r["device_us"] for r in prof if r["op"] == "attention"))
            ops = sorted({r["op"] for r in prof})
            print(f"{dev} B={batch} H={heads} S={seq} {name}: device {statistics.median(tot):.0f} us a run "
                  f"(attention {statistics.median(att):.0f}), {ms:.3f} ms a run; ops {ops}", flush=True)
        print(f"   largest difference {float(np.max(np.abs(outs['pattern'] - outs['nodes']))):.1e}", flush=True)
        fused.release(); plain.release()

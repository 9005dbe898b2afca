"""Per-node device time of an exported-SDPA attention block (B x 4 heads x 128 tokens x 64) with and without the
attention pattern on each GPU device: where the composed attention's time goes against the nodes'."""
import sys, time
import numpy as np
import devicelayer as dl
sys.path.insert(0, "tests")
import test_attention_pattern as t

for dev in sys.argv[1:]:
    for batch in (2, 16):
        t.B, t.H, t.D = batch, 4, 64
        g, feeds = t.sdpa_graph(np.random.default_rng(0), True, sq=128, skv=128)
        d = dl.device(dev)
        fused, plain = g.compile([d]), g.compile([d], fuse=False)
        for name, p in (("attention", fused), ("nodes", plain)):
            for _ in range(5):
                p(**feeds)
            t0 = time.perf_counter(); n = 0
            while time.perf_counter() - t0 < 0.5:
                p(**feeds); n += 1
            ms = (time.perf_counter() - t0) / n * 1e3
            p.run_numpy(feeds, profile=True)
            prof = p.last_profile
            rows = ", ".join(f"{r['op']} {r['device_us']:.0f}" for r in prof if r['op'] not in ("reshape",))
            print(f"{dev} B={batch} {name}: {ms:.3f} ms a run; device us: {rows}", flush=True)
        fused.release(); plain.release()

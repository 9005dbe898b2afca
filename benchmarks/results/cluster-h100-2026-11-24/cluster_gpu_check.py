"""Two-node local Ray cluster on the GPU machine, one node with the GPU: devices listed, a graph placed over both
nodes (GPU node and host-only node), result checked against NumPy."""
import sys, time
sys.path.insert(0, "tests")
import numpy as np
import cluster_nodes
import devicelayer as dl
import devicelayer.cluster as dc

cluster, conn, names, _ = cluster_nodes.start(["cuda,host", "host"])
try:
    ids = [d.id for d in dc.devices()]
    print("devices:", ids, flush=True)
    gpu = next(i for i in ids if i.startswith(names[0] + "/") and not i.endswith("/host"))
    other = f"{names[1]}/host"
    g = dl.Graph("two-nodes")
    x = g.input("x", (256, 256))
    h = g.relu(g.matmul(x, x))
    y = g.add(g.matmul(h, h), x)
    g.output("y", y)
    plan = g.compile([gpu, other], policy="pipeline")
    a = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32) / 16
    t0 = time.perf_counter(); out = plan(x=a)["y"]; t1 = time.perf_counter()
    hh = np.maximum(a.astype(np.float64) @ a, 0); want = hh @ hh + a
    err = float(np.max(np.abs(out - want)) / np.max(np.abs(want)))
    print(f"placement over {gpu} and {other}: relative error {err:.2e}, first run {t1 - t0:.3f} s", flush=True)
    print(plan.placement_report()[:1500])
finally:
    cluster_nodes.stop(cluster)

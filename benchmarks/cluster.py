"""The graph executor over a Ray cluster of several nodes on one machine, each node its own share of the CPUs.

``python -m benchmarks.cluster [--nodes 4] [--cpus-per-node 1] [--device-filter host]
[--node-backends 'cuda,host;host'] [--model squeezenet] [--batch 8] [--requests 12] [--in-flight 4]
[--sizes 65536,1048576,16777216] [--out DIR]``

Three measurements, each a ratio against a peer measured in the same run:

1. a cross-node transfer inside a two-node plan (node A makes S bytes, node B reduces them) against the same
   bytes moved by Ray alone (an actor on A returns them, an actor on B fetches and reduces them): the fetch on
   B and the whole run;
2. pipeline throughput: a model cut into two stages on two nodes, several requests in flight, against the
   whole model on one node with the same requests in flight;
3. data parallel: the same model on 1, 2, 4 ... nodes, the batch split among them, against one node.

Each node's raylet (and so its workers) starts bound to its own CPUs (``--cpus-per-node`` of them, wrapping
around where the machine has fewer), as separate machines would be.  ``--node-backends`` gives each node
its ``DEVICELAYER_BACKENDS`` (``;`` between nodes; the last repeats), ``--device-filter`` all of them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # every process on 127.0.0.1; before Ray loads
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import numpy as np  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


# -- the cluster -------------------------------------------------------------------------------------------
#: the CPUs this process may use, read before it binds itself to a node's while starting that node
MACHINE_CPUS = sorted(os.sched_getaffinity(0))


def node_cpus(index: int, per_node: int) -> set[int]:
    """The CPUs of node ``index``: ``per_node`` of the machine's, in turn (wrapping around)."""
    return {MACHINE_CPUS[(index * per_node + k) % len(MACHINE_CPUS)] for k in range(per_node)}


def start_cluster(count: int, per_node: int, backends: list[str], store: int) -> tuple[Any, list[Any]]:
    """``count`` nodes on 127.0.0.1, node k's processes bound to ``node_cpus(k)`` and seeing ``backends[k]``."""
    from ray.cluster_utils import Cluster

    mine = os.sched_getaffinity(0)

    def args(k: int) -> dict:
        return {"num_cpus": per_node, "object_store_memory": store, "node_ip_address": "127.0.0.1",
                "env_vars": {"DEVICELAYER_BACKENDS": backends[min(k, len(backends) - 1)]}}

    try:
        os.sched_setaffinity(0, node_cpus(0, per_node))  # what the raylet starts now inherits this CPU set
        cluster = Cluster(initialize_head=True, head_node_args={**args(0), "include_dashboard": False})
        handles = [cluster.head_node]
        for k in range(1, count):
            os.sched_setaffinity(0, node_cpus(k, per_node))
            handles.append(cluster.add_node(**args(k)))
    finally:
        os.sched_setaffinity(0, mine)
    cluster.wait_for_nodes()
    return cluster, handles


# -- timing ------------------------------------------------------------------------------------------------
def paired_seconds(first: Callable[[], Any], second: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """Median seconds of ``first`` and of ``second``, called in alternation (both see the same load), after two
    calls of each to warm up."""
    for _ in range(2):
        first()
        second()
    a, b = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        first()
        t1 = time.perf_counter()
        second()
        t2 = time.perf_counter()
        a.append(t1 - t0)
        b.append(t2 - t1)
    return statistics.median(a), statistics.median(b)


def median_seconds(fn: Callable[[], Any], repeat: int) -> float:
    """Median seconds of ``repeat`` calls of ``fn`` after one unmeasured call."""
    from devicelayer.measure import median_time

    fn()
    return median_time(fn, repeat)


# -- 1. a cross-node transfer against Ray alone --------------------------------------------------------------
def transfer_graph(nbytes: int) -> Any:
    """Node A: y = c + x (c a constant of ``nbytes``); node B: the sum of y."""
    import devicelayer as dl

    g = dl.Graph("transfer")
    x = g.input("x", (1,))
    c = g.constant(np.random.default_rng(1).standard_normal(nbytes // 4).astype(np.float32))
    y = g.add(c, x, name="make")
    g.output("s", g.sum(y, axes=[0], keepdims=False, name="reduce"))
    return g


class Maker:
    """Ray alone, node A: hold the constant, return c + x."""

    def __init__(self, nbytes: int) -> None:
        self.c = np.random.default_rng(1).standard_normal(nbytes // 4).astype(np.float32)

    def make(self, x: np.ndarray) -> np.ndarray:
        return self.c + x


class Reducer:
    """Ray alone, node B: fetch the array (timed as devicelayer's actor times its inputs) and reduce it."""

    def reduce(self, refs: list) -> tuple[np.ndarray, float]:
        import ray

        ray.wait(refs, num_returns=len(refs), fetch_local=False)
        t0 = time.perf_counter()
        y = ray.get(refs)[0]
        fetched = time.perf_counter() - t0
        return np.array([y.sum()], np.float32), fetched


def bench_transfer(names: list[str], node_ids: list[str], sizes: list[int], repeat: int) -> list[dict]:
    import ray

    from devicelayer.cluster.engine import on_node

    rows = []
    for nbytes in sizes:
        g = transfer_graph(nbytes)
        plan = g.compile([f"{names[0]}/host", f"{names[1]}/host"], placement={"make": f"{names[0]}/host",
                                                                           "reduce": f"{names[1]}/host"})
        assert plan.transfers == 1
        x = np.random.default_rng(2).standard_normal(1).astype(np.float32)
        c = np.random.default_rng(1).standard_normal(nbytes // 4).astype(np.float32)
        want = float((c.astype(np.float64) + x[0]).sum())
        got = float(plan(x=x)["s"])
        assert abs(got - want) <= 1e-3 * max(1.0, float(np.abs(c).sum())), (got, want)
        fetches: list[float] = []

        def ours() -> None:
            plan(x=x)
            fetches.append(plan.last_run["parts"][1]["fetched"])

        maker = ray.remote(Maker).options(scheduling_strategy=on_node(node_ids[0]), num_cpus=0).remote(nbytes)
        reducer = ray.remote(Reducer).options(scheduling_strategy=on_node(node_ids[1]), num_cpus=0).remote()
        raw_fetches: list[float] = []

        def raw() -> None:
            made = maker.make.remote(x)
            _, fetched = ray.get(reducer.reduce.remote([made]))
            raw_fetches.append(fetched)

        ours_s, raw_s = paired_seconds(ours, raw, repeat)
        ours_fetch, raw_fetch = statistics.median(fetches[2:]), statistics.median(raw_fetches[2:])
        rows.append({"bytes": nbytes, "run_ms": ours_s * 1e3, "ray_run_ms": raw_s * 1e3, "run_ratio": ours_s / raw_s,
                     "fetch_ms": ours_fetch * 1e3, "ray_fetch_ms": raw_fetch * 1e3,
                     "fetch_ratio": ours_fetch / raw_fetch if raw_fetch else float("nan"),
                     "fetch_GBps": nbytes / ours_fetch / 1e9 if ours_fetch else float("nan")})
        plan.release()
        ray.kill(maker)
        ray.kill(reducer)
    return rows


# -- 2 and 3. a real model ----------------------------------------------------------------------------------
def model_graph(name: str, batch: int) -> tuple[Any, Any, dict[str, np.ndarray]]:
    """The light ONNX model ``name`` (random weights) as a Graph of batch ``batch``, the model and feeds."""
    import onnx

    from devicelayer.onnx import load
    from devicelayer.onnx.testing import light_path, random_inputs, randomize_weights, with_batch

    model = randomize_weights(onnx.load(str(light_path(name))), seed=7)  # logits too: a softmax saturates
    if batch != 1:
        model = with_batch(model, batch)
    feeds = random_inputs(model, seed=3)
    graph = load(model).graph({k: v.shape for k, v in feeds.items()})
    return graph, model, feeds


def throughput(plan: Any, feeds: dict[str, np.ndarray], requests: int, in_flight: int) -> float:
    """Runs per second with ``in_flight`` runs in flight (after one run to warm up)."""
    plan(**feeds)
    t0 = time.perf_counter()
    plan.map([feeds] * requests, in_flight=in_flight)
    return requests / (time.perf_counter() - t0)


def check(plan: Any, model: Any, feeds: dict[str, np.ndarray]) -> float:
    """Scaled error of one run against onnxruntime."""
    from devicelayer.onnx.testing import onnxruntime_run, scaled_error

    want = onnxruntime_run(model, feeds)
    got = plan(**feeds)
    return max(scaled_error(got[k], want[k]) for k in got)


def bench_pipeline(names: list[str], device: str, model_name: str, batch: int, requests: int,
                   in_flight: int) -> dict:
    graph, model, feeds = model_graph(model_name, batch)
    one = graph.compile([f"{names[0]}/{device}"])
    two = graph.compile([f"{names[0]}/{device}", f"{names[1]}/{device}"], policy="pipeline")
    err = max(check(one, model, feeds), check(two, model, feeds))
    one_rps = throughput(one, feeds, requests, in_flight)
    two_rps = throughput(two, feeds, requests, in_flight)
    one_rps = max(one_rps, throughput(one, feeds, requests, in_flight))  # the better of two rounds each
    two_rps = max(two_rps, throughput(two, feeds, requests, in_flight))
    one_latency, two_latency = paired_seconds(lambda: one(**feeds), lambda: two(**feeds), 3)
    parts = [len(p.nodes) for p in two.parts]
    row = {"model": model_name, "batch": batch, "requests": requests, "in_flight": in_flight,
           "one_node_per_s": one_rps, "two_stages_per_s": two_rps, "ratio": two_rps / one_rps,
           "one_node_latency_ms": one_latency * 1e3, "two_stages_latency_ms": two_latency * 1e3,
           "nodes_per_stage": parts, "cross_node_transfers": two.transfers,
           "cross_node_bytes": sum(m["bytes"] for m in two.transfer_table() if m["kind"] == "cross-node"),
           "max_scaled_error_vs_onnxruntime": err}
    one.release()
    two.release()
    return row


def bench_data_parallel(names: list[str], device: str, model_name: str, batch: int, part: int, requests: int,
                        in_flight: int) -> list[dict]:
    from devicelayer.onnx.testing import random_inputs, with_batch

    graph, model, _ = model_graph(model_name, part)  # the graph of one part; a run of ``batch`` rows has several
    model = with_batch(model, batch)
    feeds = random_inputs(model, seed=5)
    rows = []
    counts = [k for k in (1, 2, 4, 8, 16) if k <= len(names)]
    base = None
    for k in counts:
        plan = graph.compile([f"{n}/{device}" for n in names[:k]], parallel="data")
        err = check(plan, model, feeds)
        rps = max(throughput(plan, feeds, requests, in_flight) for _ in range(2)) * batch
        base = base or rps
        rows.append({"model": model_name, "batch": batch, "part_batch": part, "nodes": k, "images_per_s": rps,
                     "ratio": rps / base, "max_scaled_error_vs_onnxruntime": err})
        plan.release()
    return rows


# -- main --------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=4, help="nodes of the cluster (pipeline: the first two)")
    parser.add_argument("--cpus-per-node", type=int, default=1, help="CPUs each node is bound to")
    parser.add_argument("--device-filter", default="host", help="DEVICELAYER_BACKENDS of every node")
    parser.add_argument("--node-backends", default=None, help="per node, ';'-separated (the last repeats)")
    parser.add_argument("--device", default="host", help="the local id of the device the model runs on")
    parser.add_argument("--model", default="resnet50", help="light ONNX model (onnx's test data)")
    parser.add_argument("--batch", type=int, default=8, help="data-parallel batch of a run")
    parser.add_argument("--part-batch", type=int, default=1, help="data-parallel batch of the graph (one part)")
    parser.add_argument("--pipeline-batch", type=int, default=1, help="batch of each pipelined request")
    parser.add_argument("--requests", type=int, default=12, help="requests per throughput measurement")
    parser.add_argument("--in-flight", type=int, default=4, help="requests in flight")
    parser.add_argument("--sizes", default="65536,1048576,16777216,67108864", help="transfer sizes in bytes")
    parser.add_argument("--repeat", type=int, default=7, help="runs per transfer timing")
    parser.add_argument("--store-mib", type=int, default=200, help="object store per node (MiB)")
    parser.add_argument("--only", default="transfer,pipeline,data", help="which measurements")
    parser.add_argument("--out", default=None, help="folder of the JSON (default benchmarks/results)")
    args = parser.parse_args(argv)
    if args.nodes < 2:
        parser.error("--nodes must be at least 2")
    backends = (args.node_backends or args.device_filter).split(";")
    only = set(args.only.split(","))

    from rich.console import Console
    from rich.table import Table

    import devicelayer.cluster as dc
    from benchmarks.common import write_result

    console = Console()
    with console.status(f"starting {args.nodes} nodes of {args.cpus_per_node} CPU(s)"):
        cluster, handles = start_cluster(args.nodes, args.cpus_per_node, backends, args.store_mib * 2**20)
        time.sleep(5)  # Ray's processes of every node settle before anything is timed
    results: dict[str, Any] = {"nodes": args.nodes, "cpus_per_node": args.cpus_per_node, "backends": backends,
                               "machine_cpus": len(MACHINE_CPUS)}
    try:
        conn = dc.connect(cluster.address, log_to_driver=False, _node_ip_address="127.0.0.1")
        by_id = {n.node_id: n for n in conn.nodes_now()}
        names = [by_id[h.node_id].name for h in handles]
        node_ids = [h.node_id for h in handles]
        results["node_cpus"] = {n: sorted(node_cpus(k, args.cpus_per_node)) for k, n in enumerate(names)}
        results["devices"] = [d.id for d in dc.devices()]
        import ray

        results["ray"] = ray.__version__
        if "transfer" in only:
            with console.status("cross-node transfers against Ray alone"):
                results["transfer"] = bench_transfer(names, node_ids, [int(s) for s in args.sizes.split(",")],
                                                     args.repeat)
            table = Table(title="a cross-node transfer (node A -> node B) against Ray alone, same bytes")
            for col in ("bytes", "run ms", "Ray run ms", "run ratio", "fetch ms", "Ray fetch ms", "fetch ratio",
                        "fetch GB/s"):
                table.add_column(col, justify="right")
            for r in results["transfer"]:
                table.add_row(str(r["bytes"]), f"{r['run_ms']:.2f}", f"{r['ray_run_ms']:.2f}",
                              f"{r['run_ratio']:.2f}", f"{r['fetch_ms']:.3f}", f"{r['ray_fetch_ms']:.3f}",
                              f"{r['fetch_ratio']:.2f}", f"{r['fetch_GBps']:.2f}")
            console.print(table)
        if "pipeline" in only:
            with console.status(f"pipeline: {args.model} in two stages against one node"):
                results["pipeline"] = bench_pipeline(names, args.device, args.model, args.pipeline_batch,
                                                     args.requests, args.in_flight)
            r = results["pipeline"]
            table = Table(title=f"pipeline: {r['model']} (batch {r['batch']}), {r['in_flight']} requests in flight")
            for col in ("one node /s", "two stages /s", "ratio", "latency 1 node ms", "latency 2 stages ms",
                        "graph nodes per stage", "cross-node bytes", "error vs ORT"):
                table.add_column(col, justify="right")
            table.add_row(f"{r['one_node_per_s']:.2f}", f"{r['two_stages_per_s']:.2f}", f"{r['ratio']:.2f}",
                          f"{r['one_node_latency_ms']:.1f}", f"{r['two_stages_latency_ms']:.1f}",
                          str(r["nodes_per_stage"]), str(r["cross_node_bytes"]),
                          f"{r['max_scaled_error_vs_onnxruntime']:.1e}")
            console.print(table)
        if "data" in only:
            with console.status(f"data parallel: {args.model}, batch {args.batch}"):
                results["data_parallel"] = bench_data_parallel(names, args.device, args.model, args.batch,
                                                               args.part_batch, args.requests, args.in_flight)
            table = Table(title=f"data parallel: {args.model}, runs of {args.batch} rows in parts of "
                                f"{args.part_batch} over the nodes")
            for col in ("nodes", "images/s", "ratio to 1 node", "error vs ORT"):
                table.add_column(col, justify="right")
            for r in results["data_parallel"]:
                table.add_row(str(r["nodes"]), f"{r['images_per_s']:.2f}", f"{r['ratio']:.2f}",
                              f"{r['max_scaled_error_vs_onnxruntime']:.1e}")
            console.print(table)
    finally:
        dc.disconnect()
        cluster.shutdown()
    path = write_result(args.out or RESULTS, "cluster", results)
    console.print(f"written {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

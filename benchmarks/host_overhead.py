"""Where a host plan's time goes: per-node cost of a chain of tiny nodes against onnxruntime's, and a model's
recorded host calls timed one by one, summed per op type.

    python -m benchmarks.host_overhead chain [--nodes 1,64,256] [--threads N]
    python -m benchmarks.host_overhead ops MODEL.onnx [--reps R] [--threads N]
    python -m benchmarks.host_overhead {bound,post-ops,attention} MODEL.onnx [--rounds R] [--threads N]

``chain``: an ONNX graph of N alternating Add (of a constant) and Relu nodes on a 1x16 float32 tensor, run as
a devicelayer host plan and as an onnxruntime session (same threads), NumPy in and out; per call medians, and
the per-node cost as the slope between the chain lengths.  ``ops``: the plan's recorded host calls run in order
on the device's worker, each timed, medians per call summed per op type, beside the whole run's time (the
difference is the run's fixed cost): as recorded, with every call that wakes oneDNN's team in its alone form,
and with the faster of the two per call; and onnxruntime's profiler's per-node medians summed per op type.
``bound``, ``post-ops`` and ``attention``: the model as two host plans in one process, one in an earlier form,
one as the library makes it now, and onnxruntime beside them; blocks of 100 runs in a rotating order, a pause
before each; per contestant the fastest and the median block.
``bound``: the earlier plan's oneDNN calls run each layer as a call made before ``Layer.bind`` did (pointing the
layer's shared memories at the call's operands, then executing).  ``post-ops``: the earlier plan's small products
with an epilogue run NumPy's product and steps instead of oneDNN's matmul with the epilogue as post-ops.
``attention``: the earlier plan keeps attention's nodes (no attention pattern).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import statistics
import sys
import time
from typing import Any, Callable, Iterator

import numpy as np


def chain_model(n: int, shape: tuple[int, ...] = (1, 16)) -> bytes:
    """N nodes alternating ``Add(x, c)`` and ``Relu``."""
    from onnx import TensorProto, helper

    nodes, prev = [], "x"
    for i in range(n):
        out = f"t{i}" if i < n - 1 else "y"
        nodes.append(helper.make_node("Relu", [prev], [out]) if i % 2 else helper.make_node("Add", [prev, "c"], [out]))
        prev = out
    c = helper.make_tensor("c", TensorProto.FLOAT, shape, np.full(shape, -0.01, np.float32).ravel().tolist())
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], [c])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _median_us(fn: Callable[[], Any], calls: int, rounds: int) -> float:
    fn()
    per = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per.append((time.perf_counter() - t0) / calls)
    return statistics.median(per) * 1e6


def chain(lengths: list[int], threads: int) -> list[dict[str, Any]]:
    """Per-call medians of devicelayer and onnxruntime on chains of each length (alternating rounds)."""
    import onnxruntime as ort

    import devicelayer.onnx as dlo

    x = np.random.default_rng().standard_normal((1, 16)).astype(np.float32)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    rows = []
    for n in lengths:
        data = chain_model(n)
        sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        plan = dlo.load(data).compile(["host"])
        assert np.allclose(plan.run_numpy({"x": x})["y"], sess.run(None, {"x": x})[0], atol=1e-6)
        d, o = [], []
        for _ in range(5):
            d.append(_median_us(lambda: plan.run_numpy({"x": x}), 50, 3))
            o.append(_median_us(lambda: sess.run(None, {"x": x}), 50, 3))
        rows.append({"nodes": n, "devicelayer_us": statistics.median(d), "onnxruntime_us": statistics.median(o)})
        plan.release()
    for a, b in zip(rows, rows[1:]):
        dn = b["nodes"] - a["nodes"]
        b["devicelayer_us_per_node"] = (b["devicelayer_us"] - a["devicelayer_us"]) / dn
        b["onnxruntime_us_per_node"] = (b["onnxruntime_us"] - a["onnxruntime_us"]) / dn
    return rows


def stretches(plan: Any) -> list[Any]:
    """The host stretches (``backends.host.stretch.Stretch``) of a compiled ONNX plan's recorded runs."""
    from devicelayer.graph.replay import Segment

    found = []
    for sub in plan._plans():
        for prepared in sub._cache.values():
            if prepared.replay is None:
                continue
            found += [w.recording.native for w in prepared.replay.work if isinstance(w, Segment)]
    return found


def ops(path: str, reps: int, threads: int) -> dict[str, Any]:
    """Per op type: calls and the sum of their per-call medians, the calls run in order on the device's worker:
    as the plan runs them, with each call that wakes oneDNN's team in its alone form instead, and the faster of
    the two per call; onnxruntime's per op type (its profiler, same threads); the whole runs' medians beside
    them."""
    import json
    import os

    import onnx
    import onnxruntime as ort

    import devicelayer as dl
    import devicelayer.onnx as dlo
    from benchmarks.host_vs_onnxruntime import random_feeds

    model = onnx.load(path)
    feeds = random_feeds(model, 0)
    plan = dlo.load(model).compile(["host"])
    plan.run_numpy(feeds)
    run_us = _median_us(lambda: plan.run_numpy(feeds), max(1, reps // 4), 5)
    items = [item for s in stretches(plan) for item in s.items]
    team_form = [fn for _, fn, _, _ in items]
    alone_form = []
    for _, fn, _, team in items:
        made = getattr(fn, "by_itself", None) if team else None
        alone_form.append((made() or fn) if made is not None else fn)

    def in_order(calls: list[Callable[[], Any]]) -> tuple[list[float], float]:
        """Per-call medians (us) of ``reps`` runs of the calls in order, and the median run's sum."""
        per: list[list[float]] = [[] for _ in calls]
        sums = []

        def run() -> None:  # (on the device's worker, whose OpenMP team the calls wake)
            with np.errstate(all="ignore"):
                for _ in range(reps):
                    total = 0.0
                    for i, fn in enumerate(calls):
                        t0 = time.perf_counter()
                        fn()
                        took = time.perf_counter() - t0
                        per[i].append(took)
                        total += took
                    sums.append(total)
        dl.device("host").run(run, [], "calls in order").wait()
        return [statistics.median(v) * 1e6 for v in per], statistics.median(sums) * 1e6

    team_us, team_run = in_order(team_form)
    alone_us, alone_run = in_order(alone_form)
    best_form = [a if au < tu else t for t, a, tu, au in zip(team_form, alone_form, team_us, alone_us)]
    _, best_run = in_order(best_form)
    per_op: dict[str, dict[str, float]] = collections.defaultdict(lambda: collections.defaultdict(float))
    for (label, _, _, team), tu, au in zip(items, team_us, alone_us):
        row = per_op[label.rsplit("(", 1)[-1].rstrip(")")]
        row["calls"] += 1
        row["team_calls"] += bool(team)
        row["us"] += tu
        row["alone_us"] += au
        row["best_us"] += min(tu, au)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    sess.run(None, feeds)
    ort_run_us = _median_us(lambda: sess.run(None, feeds), max(1, reps // 4), 5)
    opts.enable_profiling = True
    profiled = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    for _ in range(reps):
        profiled.run(None, feeds)
    trace = profiled.end_profiling()
    with open(trace) as f:
        events = json.load(f)
    os.remove(trace)
    node_times: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            node_times[(e["args"].get("op_name", "?"), e["name"])].append(float(e["dur"]))
    ort_ops: dict[str, float] = collections.defaultdict(float)
    for (op, _), ts in node_times.items():
        ort_ops[op] += statistics.median(ts)
    rows = sorted(({"op": op, **{k: (int(v) if k.endswith("calls") else v) for k, v in r.items()}}
                   for op, r in per_op.items()), key=lambda r: -r["us"])
    plan.release()
    return {"model": path, "threads": threads, "run_us": run_us, "calls": len(items),
            "sum_us": team_run, "alone_sum_us": alone_run, "best_sum_us": best_run, "ops": rows,
            "onnxruntime": {"run_us": ort_run_us, "sum_us": sum(ort_ops.values()),
                            "ops": dict(sorted(ort_ops.items(), key=lambda kv: -kv[1]))}}


@contextlib.contextmanager
def _per_call_runs() -> Iterator[None]:
    """oneDNN layers run as each call did before ``Layer.bind``: the layer's shared memories pointed per call."""
    from devicelayer.backends.host import dnnl

    bind = dnnl.Layer.bind
    dnnl.Layer.bind = lambda self, *operands, keep=None: lambda keep=keep: self.run(*operands)
    try:
        yield
    finally:
        dnnl.Layer.bind = bind


@contextlib.contextmanager
def _numpy_epilogues() -> Iterator[None]:
    """A small product with an epilogue runs NumPy's product and steps, not oneDNN's matmul with post-ops."""
    from devicelayer.backends.host import gemm

    gemm.OnednnGemm.takes_epilogue = False
    try:
        yield
    finally:
        gemm.OnednnGemm.takes_epilogue = True


@contextlib.contextmanager
def _no_attention() -> Iterator[None]:
    """The attention pattern is not looked for: Q·Kᵀ, its scale and mask, softmax and ·V stay nodes."""
    from devicelayer.graph import patterns

    matchers = patterns.MATCHERS
    patterns.MATCHERS = tuple(m for m in matchers if m is not patterns.attention)
    try:
        yield
    finally:
        patterns.MATCHERS = matchers


#: in-process comparisons: the earlier form's name and what makes a plan take it, against the current form
COMPARISONS: dict[str, tuple[str, Callable[[], Any]]] = {"bound": ("per-call run", _per_call_runs),
                                                         "post-ops": ("numpy epilogue", _numpy_epilogues),
                                                         "attention": ("attention as nodes", _no_attention)}


def compare(what: str, path: str, rounds: int, threads: int) -> dict[str, Any]:
    """Microseconds a run (fastest block, median block) of the model's plan in the earlier form of ``what``
    (``COMPARISONS``), in the current form, and of onnxruntime; whether the two plans' outputs are identical."""
    import onnx
    import onnxruntime as ort

    import devicelayer as dl
    import devicelayer.onnx as dlo
    from benchmarks.host_vs_onnxruntime import random_feeds

    model = onnx.load(path)
    feeds = random_feeds(model, 0)
    earlier, form = COMPARISONS[what]
    plans = {}
    for name in (earlier, what):
        with form() if name == earlier else contextlib.nullcontext():
            dl.device("host").onednn_layers.clear()  # (each plan builds its own layers)
            plans[name] = plan = dlo.load(model).compile(["host"])
            for _ in range(30):  # (a plan binds its calls at its first runs, and settles its stretches' form)
                plan.run_numpy(feeds)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    runs: dict[str, Callable[[], Any]] = {name: (lambda p=p: p.run_numpy(feeds)) for name, p in plans.items()}
    runs["onnxruntime"] = lambda: sess.run(None, feeds)
    for _ in range(30):
        runs["onnxruntime"]()
    times: dict[str, list[float]] = collections.defaultdict(list)
    order = list(runs)
    for r in range(rounds):
        order = order[1:] + order[:1] if r % 3 else order[::-1]
        for name in order:
            time.sleep(0.05)
            times[name].append(_median_us(runs[name], 100, 1))
    a, b = (plans[n].run_numpy(feeds) for n in (earlier, what))
    for p in plans.values():
        p.release()
    return {"model": path, "identical": all(np.array_equal(a[k], b[k]) for k in a),
            "max_diff": max(float(np.max(np.abs(a[k].astype(np.float64) - b[k]), initial=0.0)) for k in a),
            "us": {n: {"fastest": min(v), "median": statistics.median(v)} for n, v in times.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["chain", "ops", *COMPARISONS])
    ap.add_argument("model", nargs="?", help="ONNX file (ops)")
    ap.add_argument("--nodes", default="1,64,256", help="chain lengths (chain)")
    ap.add_argument("--reps", type=int, default=30, help="timed calls of each node (ops)")
    ap.add_argument("--rounds", type=int, default=18, help="blocks of each contestant (bound, post-ops)")
    ap.add_argument("--threads", type=int, help="CPUs to use (default: all of the process's)")
    ap.add_argument("--out", help="folder for the JSON document (ops)")
    args = ap.parse_args(argv)
    import os

    cpus = sorted(os.sched_getaffinity(0))
    if args.threads and args.threads < len(cpus):
        os.sched_setaffinity(0, cpus[:args.threads])
    threads = len(os.sched_getaffinity(0))
    if args.what == "chain":
        for r in chain([int(n) for n in args.nodes.split(",")], threads):
            print(r)
        return 0
    if not args.model:
        print(f"{args.what} needs MODEL.onnx", file=sys.stderr)
        return 2
    if args.what in COMPARISONS:
        doc = compare(args.what, args.model, args.rounds, threads)
        cells = ", ".join(f"{n} {t['fastest']:.0f} / {t['median']:.0f}" for n, t in doc["us"].items())
        print(f"{doc['model']}: us a run, fastest / median block: {cells}; outputs identical: {doc['identical']} "
              f"(largest difference {doc['max_diff']:.2g})")
        return 0
    doc = ops(args.model, args.reps, threads)
    print(f"{doc['model']} ({threads} threads): run {doc['run_us']:.0f} us; {doc['calls']} host calls in order "
          f"{doc['sum_us']:.0f} us, every team call alone {doc['alone_sum_us']:.0f} us, the faster form per call "
          f"{doc['best_sum_us']:.0f} us")
    for r in doc["ops"]:
        print(f"  {r['op']:28s} {r['calls']:4d} calls ({r['team_calls']:3d} team) {r['us']:9.1f} us, alone "
              f"{r['alone_us']:9.1f}, faster {r['best_us']:9.1f}")
    o = doc["onnxruntime"]
    print(f"onnxruntime: run {o['run_us']:.0f} us; nodes summing {o['sum_us']:.0f} us")
    for op, us in o["ops"].items():
        print(f"  {op:28s} {us:9.1f} us")
    if args.out:
        import json
        import pathlib

        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"ops-{pathlib.Path(args.model).stem}-{threads}.json").write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

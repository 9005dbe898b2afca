"""Graph executor: host overhead per op of a prepared plan; overlap of two branches on two devices; memory plan."""

from __future__ import annotations

import itertools
import statistics
import time

import numpy as np

import devicelayer as dl
from benchmarks.peers import peer_for

TITLE = "graph executor (host us per op; overlap = both branches / longer branch alone; memory = peak / lower bound)"


def _chain(n_ops: int, size: int, name: str = "x"):
    g = dl.Graph()
    x = g.input(name, (size,))
    y = x
    for i in range(n_ops):
        y = g.relu(y) if i % 2 else g.neg(y)
    g.output("y", y)
    return g


def _overhead(dev, quick: bool) -> list[dict]:
    n_ops = 100 if quick else 400
    graph = _chain(n_ops, 16)
    xt = dl.tensor(np.ones(16, np.float32), dev)
    raw_detail = ""
    peer = peer_for(dev)
    if peer is not None:  # what the raw backend call alone costs per op, same device, same process
        from benchmarks.launch import _kernel_source
        raw = peer.Raw(dev, _kernel_source(dev), "increment", 16)
        raw.launch()
        raw.finish()
        raws = []
        for _ in range(3 if quick else 7):
            t0 = time.perf_counter()
            for _ in range(n_ops):
                raw.launch()
            raws.append((time.perf_counter() - t0) * 1e6 / n_ops)
            raw.finish()
        raw_detail = f"; raw {peer.NAME} launch {statistics.median(raws):.1f} us/op"
    rows = []
    for mode, record in (("recorded", True), ("node by node", False)):
        plan = graph.compile([dev], record=record)
        for t in plan.run({"x": xt}).values():
            dev.pool.free(t.buffer)
        host, wall = [], []
        for _ in range(5 if quick else 15):
            t0 = time.perf_counter()
            out = plan.run({"x": xt})["y"]
            out.ready.wait()
            wall.append(time.perf_counter() - t0)
            host.append(plan.last_submit_seconds * 1e6 / n_ops)
            dev.pool.free(out.buffer)
        plan.release()
        rows.append({"device": dev.id, "metric": f"host overhead per op ({mode})", "value": statistics.median(host),
                     "unit": "us/op", "detail": f"{n_ops}-op chain on 16 floats; wall "
                                                f"{statistics.median(wall) / n_ops * 1e6:.2f} us/op{raw_detail}"})
    return rows


def _branches(a, b, size: int, depth: int):
    g = dl.Graph()
    x = g.input("x", (size,))
    left, right = x, x
    place = {}
    for i in range(depth):
        left = g.sigmoid(left, name=f"l{i}")
        right = g.sigmoid(right, name=f"r{i}")
        place[f"l{i}"], place[f"r{i}"] = a.id, b.id
    g.output("left", left)
    g.output("right", right)
    return g, place


def _overlap(a, b, quick: bool) -> dict:
    size, depth = (1 << 18, 8) if quick else (1 << 21, 16)
    xv = np.random.default_rng(0).standard_normal(size).astype(np.float32)

    def timed(plan, inputs, rounds=3 if quick else 5):
        plan(**inputs)
        ts = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            plan(**inputs)
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    alone = []
    for d in (a, b):
        g = dl.Graph()
        x = g.input("x", (size,))
        y = x
        for i in range(depth):
            y = g.sigmoid(y)
        g.output("y", y)
        alone.append(timed(g.compile([d]), {"x": xv}))
    g, place = _branches(a, b, size, depth)
    both = timed(g.compile([a, b], placement=place), {"x": xv})
    return {"device": f"{a.id}+{b.id}", "metric": "two branches / longer alone", "value": both / max(alone),
            "unit": "ratio", "detail": f"alone {alone[0] * 1e3:.2f} / {alone[1] * 1e3:.2f} ms, both {both * 1e3:.2f} ms"}


def _memory(dev) -> list[dict]:
    rows = []
    g = dl.Graph()
    x = g.input("x", (64, 512))
    h = x
    skips = []
    for i in range(12):  # a residual-style network: branches that join later keep several tensors live
        a = g.relu(h)
        b = g.tanh(a)
        skips.append(b)
        h = g.sigmoid(b)
        if len(skips) > 2:
            h = g.gelu(h)
            skips.pop(0)
    g.output("y", h)
    for name, graph in (("residual-style 48 ops", g), ("chain 200 ops", _chain(200, 1 << 14))):
        plan = graph.compile([dev])
        m = plan.memory_report()[dev.id]
        rows.append({"device": dev.id, "metric": f"memory peak / lower bound ({name})",
                     "value": m["peak"] / m["lower_bound"], "unit": "ratio",
                     "detail": f"peak {m['peak']} B, lower bound {m['lower_bound']} B, no reuse {m['no_reuse']} B"})
    return rows


def run(devices, quick: bool = False) -> list[dict]:
    rows = [r for d in devices for r in _overhead(d, quick)]
    pairs = list(itertools.combinations(devices, 2))
    for a, b in pairs[: 3 if quick else 6]:
        rows.append(_overlap(a, b, quick))
    rows += _memory(devices[0])
    return rows

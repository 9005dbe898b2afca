"""Kernel shapes of products and convolutions (the tiled kernels' micro-tile edges; on CPU devices the
register-blocked kernels too) measured once per device and geometry, kept in the disk cache, and taken from it by
later plans (devicelayer/kernels/tile_tuning.py)."""

import json

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.kernels import tile_tuning, tiles
from devicelayer.kernels.op import Launch, Plan

from op_cases import graph_reference64


@pytest.fixture
def tuning(monkeypatch, tmp_path):
    """A cache of this test's own, timing on for every device, and products of a few thousand multiply-adds tuned;
    counts the plans timed (one call per candidate edge)."""
    monkeypatch.setenv("DEVICELAYER_CACHE", str(tmp_path))
    monkeypatch.setenv("DEVICELAYER_TUNE", "all")
    monkeypatch.setattr(tile_tuning, "MIN_WORK", 1 << 12)
    timed: list[int] = []
    real = tile_tuning.time_plan

    def counted(op, device, ins, outs, attrs, plan):
        timed.append(tile_tuning.edge_of(plan))
        return real(op, device, ins, outs, attrs, plan)
    monkeypatch.setattr(tile_tuning, "time_plan", counted)
    for d in dl.devices():
        d._tuned_choices.clear()  # (read the test's cache, not one read before)
    yield timed
    for d in dl.devices():
        d._tuned_choices.clear()


def _graph(rng):
    """A product with a bias and a ReLU after it, and a 3x3 convolution with bias and a hard sigmoid, each of tens
    of thousands of multiply-adds (the activation keeps the convolution on the tiled kernel where a vendor library
    would take it plain)."""
    g = dl.Graph()
    a = g.input("a", (96, 80))
    x = g.input("x", (1, 8, 20, 18))
    w = g.constant(rng.standard_normal((80, 72)).astype(np.float32))
    c = g.constant(rng.standard_normal(72).astype(np.float32))
    g.output("y", g.relu(g.add(g.matmul(a, w), c)))
    k = g.constant((rng.standard_normal((40, 8, 3, 3)) / 8).astype(np.float32))
    b = g.constant(rng.standard_normal(40).astype(np.float32))
    g.output("z", g.conv(x, k, b, pads=[1, 1, 1, 1], activation="hard_sigmoid"))
    return g


def _feeds(rng):
    return {"a": rng.standard_normal((96, 80)).astype(np.float32),
            "x": rng.standard_normal((1, 8, 20, 18)).astype(np.float32)}


def _edges(plan):
    """The kernel shape of each node's product or convolution launches (a micro-tile edge, or
    ``tiles.REGISTER``), by op, for the nodes that have some."""
    out = {}
    for step in plan._prepared.steps:
        if step.kind == "node":
            edges = {tile_tuning.edge_of(Plan([s])) for s in step.op_plan.steps if isinstance(s, Launch)} - {None}
            if edges:
                out[step.node.op] = edges
    return out


def _stored(device):
    """The stored choices by op name."""
    path = device._tuned(tile_tuning.KIND).path()
    entries = json.loads(path.read_text())["entries"] if path.exists() else {}
    return {key.split("'")[1]: (key, entry) for key, entry in entries.items()}


def _check(g, plan, rng):
    for _ in range(2):
        feeds = _feeds(rng)
        got = plan.run_numpy(feeds)
        want = graph_reference64(g, feeds)
        for name in ("y", "z"):
            np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)


def _candidates(device, op):
    """The shapes timed for ``op``: the edges the device's shared memory takes (a convolution's rectangular
    micro-tiles too), and the register-blocked kernels where they are the static rule (CPU devices)."""
    from devicelayer.kernels.ops.matmul import register_kernels, tiled_shared_bytes

    edges = [e for e in tiles.MICRO_EDGES if device.info.local_memory >= tiled_shared_bytes("float", e)]
    wide = [t for t in tiles.WIDE_TILES if device.info.local_memory >= tiled_shared_bytes("float", *t[:1], cols=t[1])]
    return edges + (wide if op == "conv" else []) + ([tiles.REGISTER] if register_kernels(device.info) else [])


def _all_candidates(device, ops):
    """Every op's candidates, in one order (shapes mix ints and pairs)."""
    return sorted((e for op in ops for e in _candidates(device, op)), key=str)


def _shape(value):
    """A stored shape as the tuner takes it (a rectangular micro-tile is kept as a JSON list)."""
    return tuple(value) if isinstance(value, list) else value


def _kernel_ops(device):
    """The ops of ``_graph`` that run product or convolution kernels on ``device`` (none on the host; on CUDA, the
    convolution, whose activation cuDNN does not apply)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DEVICELAYER_TUNE", "0")
        plan = _graph(np.random.default_rng(0)).compile([device])
        try:
            return sorted(_edges(plan))
        finally:
            plan.release()


def test_a_plan_times_each_edge_once_keeps_the_fastest_and_a_later_plan_takes_it(device, tuning, rng):
    ops = _kernel_ops(device)
    assert ("conv" in ops) == (device.info.kernel_language != "python")
    tuning.clear()
    g = _graph(rng)
    plan = g.compile([device])
    try:
        stored = _stored(device)
        assert sorted(tuning, key=str) == _all_candidates(device, ops)  # each shape timed once for each op
        assert sorted(stored) == ops
        for op, (_, entry) in stored.items():
            candidates = _candidates(device, op)
            assert _shape(entry["micro"]) in candidates and _shape(entry["static"]) in candidates
            assert sorted(entry["times_ms"]) == sorted(str(e) for e in candidates)
            assert all(t is None or t > 0 for t in entry["times_ms"].values())
            fastest = min(entry["times_ms"].items(), key=lambda kv: kv[1] if kv[1] is not None else 1e30)
            assert str(_shape(entry["micro"])) in (str(_shape(entry["static"])), fastest[0])
        assert _edges(plan) == {op: {_shape(entry["micro"])} for op, (_, entry) in stored.items()}
        _check(g, plan, rng)
    finally:
        plan.release()
    # a later process (the choices read from the disk again), given another edge than the static one: no timing,
    # that edge, right results
    for op, (key, entry) in stored.items():
        entry["micro"] = next(e for e in reversed(_candidates(device, op)) if e != _shape(entry["static"]))
        device._tuned(tile_tuning.KIND).put(key, entry)
    device._tuned_choices.clear()
    tuning.clear()
    again = g.compile([device])
    try:
        assert tuning == []
        assert _edges(again) == {op: {_shape(entry["micro"])} for op, (_, entry) in stored.items()}
        _check(g, again, rng)
    finally:
        again.release()


def test_a_stored_choice_that_does_not_apply_is_timed_again(device, tuning, rng):
    ops = _kernel_ops(device)
    tuning.clear()
    g = _graph(rng)
    g.compile([device]).release()
    stored = _stored(device)
    for (key, _), bad in zip(stored.values(), [{"micro": 3}, "eight"]):
        device._tuned(tile_tuning.KIND).put(key, bad)
    device._tuned_choices.clear()
    tuning.clear()
    plan = g.compile([device])
    try:
        assert sorted(tuning, key=str) == _all_candidates(device, ops)
        assert all(_shape(entry["micro"]) in _candidates(device, op) for op, (_, entry) in _stored(device).items())
        _check(g, plan, rng)
    finally:
        plan.release()


@pytest.mark.parametrize("why", ["0", "off", "False", "small"])
def test_nothing_is_timed_or_stored_with_timing_off_or_for_small_products(device, tuning, rng, monkeypatch, why):
    """``DEVICELAYER_TUNE`` off (its spellings), or products under ``MIN_WORK``: the static rule, nothing stored."""
    if why == "small":
        monkeypatch.setattr(tile_tuning, "MIN_WORK", 1 << 30)
    else:
        monkeypatch.setenv("DEVICELAYER_TUNE", why)
    g = _graph(rng)
    plan = g.compile([device])
    try:
        assert tuning == [] and _stored(device) == {}
        _check(g, plan, rng)
    finally:
        plan.release()


def test_forcing_takes_only_the_edges_the_kernels_are_built_for():
    for bad in (3, (8, 4), [4, 8], "4x8"):
        with pytest.raises(ValueError, match="not one of"):
            with tiles.forcing(bad):
                pass
    assert tiles.forced() is None
    with tiles.forcing(8):
        with tiles.forcing(2):
            assert tiles.forced() == 2
            with tiles.forcing(tiles.REGISTER):
                assert tiles.forced() == tiles.REGISTER
            with tiles.forcing((4, 8)):
                assert tiles.forced() == (4, 8)
            assert tiles.forced() == 2
        assert tiles.forced() == 8
    assert tiles.forced() is None


def test_by_default_only_gpus_time_tile_shapes(device, tuning, rng, monkeypatch):
    """Unset (or any value but 0 and ``all``), timing is for GPUs; CPU devices keep the static rule unless a
    choice is stored."""
    for value in (None, "1", "yes"):
        if value is None:
            monkeypatch.delenv("DEVICELAYER_TUNE", raising=False)
        else:
            monkeypatch.setenv("DEVICELAYER_TUNE", value)
        assert tile_tuning.enabled(device) == (device.info.device_type == "gpu")
    monkeypatch.delenv("DEVICELAYER_TUNE", raising=False)
    ops = _kernel_ops(device)
    tuning.clear()
    g = _graph(rng)
    plan = g.compile([device])
    try:
        timed = device.info.device_type == "gpu"
        assert sorted(tuning, key=str) == (_all_candidates(device, ops) if timed else [])
        assert sorted(_stored(device)) == (ops if timed else [])
        _check(g, plan, rng)
    finally:
        plan.release()

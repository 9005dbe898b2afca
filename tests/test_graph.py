"""The graph executor: the seed's test matrix on every combination of the devices present."""

from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.kernels.op import OPS, Op, TensorType, register

ALL = [d.id for d in dl.devices()]
PAIRS = [(a, b) for a, b in itertools.permutations(ALL, 2)] or [(ALL[0], ALL[0])]


def np_chain(x, ops):
    for op in ops:
        x = OPS[op].reference([x], OPS[op].check([TensorType(x.shape, x.dtype)], {}))[0]
    return x


def close(got, want, tol=2e-5):
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dev", ALL)
def test_linear_chain_on_one_device(dev, rng):
    g = dl.Graph()
    x = g.input("x", (3, 257))
    ops = ["relu", "sigmoid", "tanh", "exp", "softsign"]
    y = x
    for op in ops:
        y = getattr(g, op)(y)
    g.output("y", y)
    plan = g.compile([dev])
    xv = rng.standard_normal((3, 257)).astype(np.float32)
    close(plan(x=xv)["y"], np_chain(xv.astype(np.float64), ops))
    assert plan.transfers == 0
    assert {r["device"] for r in plan.placement_table()} == {dev}


@pytest.mark.parametrize("a,b", PAIRS, ids=[f"{a}+{b}" for a, b in PAIRS])
def test_disjoint_branches_on_two_devices(a, b, rng):
    g = dl.Graph()
    x = g.input("x", (1000,))
    left = g.tanh(g.sigmoid(x, name="l1"), name="l2")
    right = g.exp(g.neg(x, name="r1"), name="r2")
    g.output("left", left)
    g.output("right", right)
    plan = g.compile([a, b], placement={"l1": a, "l2": a, "r1": b, "r2": b})
    xv = rng.standard_normal(1000).astype(np.float32)
    out = plan(x=xv)
    close(out["left"], np.tanh(1 / (1 + np.exp(-xv.astype(np.float64)))))
    close(out["right"], np.exp(-xv.astype(np.float64)))
    table = {r["node"]: r["device"] for r in plan.placement_table()}
    assert table == {"l1": a, "l2": a, "r1": b, "r2": b}


@pytest.mark.parametrize("a,b", PAIRS, ids=[f"{a}+{b}" for a, b in PAIRS])
def test_bounce_between_devices(a, b, rng):
    g = dl.Graph()
    x = g.input("x", (5, 77))
    y = g.relu(x, name="n1")
    y = g.sigmoid(y, name="n2")
    y = g.tanh(y, name="n3")
    g.output("y", y)
    plan = g.compile([a, b], placement={"n1": a, "n2": b, "n3": a})
    xv = rng.standard_normal((5, 77)).astype(np.float32)
    close(plan(x=xv)["y"], np.tanh(1 / (1 + np.exp(-np.maximum(xv.astype(np.float64), 0)))))
    assert plan.transfers == (2 if a != b else 0)
    assert "2 transfer" in plan.placement_report() or a == b


@pytest.mark.parametrize("dev", ALL)
def test_large_fan_out_and_fan_in(dev, rng):
    g = dl.Graph()
    x = g.input("x", (64,))
    names = ["relu", "sigmoid", "tanh", "exp", "neg", "abs", "softsign", "erf", "sin", "cos"] * 3
    branches = [getattr(g, op)(x) for op in names]
    for i, v in enumerate(branches):
        g.output(f"o{i}", v)
    plan = g.compile([dev])
    xv = rng.standard_normal(64).astype(np.float32)
    out = plan(x=xv)
    for i, op in enumerate(names):
        close(out[f"o{i}"], np_chain(xv.astype(np.float64), [op]), 1e-4)


@pytest.mark.parametrize("dev", ALL)
def test_long_chain_and_memory_reuse(dev, rng):
    g = dl.Graph()
    x = g.input("x", (4096,))
    y = x
    ops = ["sigmoid", "tanh"] * 60
    for op in ops:
        y = getattr(g, op)(y)
    g.output("y", y)
    plan = g.compile([dev], fuse=False)  # node by node: the arena reuses the chain's buffers
    xv = rng.standard_normal(4096).astype(np.float32)
    close(plan(x=xv)["y"], np_chain(xv.astype(np.float64), ops), 1e-4)
    mem = plan.memory_report()[dev]
    assert mem["peak"] <= 1.05 * mem["lower_bound"]
    assert mem["no_reuse"] > 10 * mem["peak"]


@pytest.mark.parametrize("dev", ALL)
def test_reexecution_of_a_cached_plan_and_new_shapes(dev, rng):
    g = dl.Graph()
    x = g.input("x", (10, 10))
    g.output("y", g.gelu(g.relu(x)))
    plan = g.compile([dev])
    for shape in [(10, 10), (10, 10), (3, 7), (10, 10)]:
        xv = rng.standard_normal(shape).astype(np.float32)
        got = plan(x=xv)["y"]
        assert got.shape == shape
        close(got, np_chain(xv.astype(np.float64), ["relu", "gelu"]), 1e-4)
    assert len(plan._cache) == 2


def test_host_only_graph(rng):
    g = dl.Graph()
    x = g.input("x", (33,))
    g.output("y", g.exp(g.neg(x)))
    plan = g.compile(["host"])
    xv = rng.standard_normal(33).astype(np.float32)
    close(plan(x=xv)["y"], np.exp(-xv.astype(np.float64)))


class _Fails(Op):
    """Test op: raises at run time while ``armed``."""

    name = "test_fail_when_armed"
    armed = True

    def infer(self, inputs, attrs):
        return [inputs[0]]

    def reference(self, inputs, attrs):
        if _Fails.armed:
            raise RuntimeError("armed op exploded")
        return [inputs[0] * 2]


@pytest.fixture(autouse=True, scope="module")
def _failing_op():
    """Register the test op only while this module runs (the op library's own tests must not see it)."""
    if "test_fail_when_armed" not in OPS:
        register(_Fails)
    yield
    OPS.pop("test_fail_when_armed", None)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("dev", ALL)
def test_failing_op_names_the_node_and_plan_runs_again(dev, rng):
    g = dl.Graph()
    x = g.input("x", (8,))
    a = g.relu(x, name="before")
    b = g.apply("test_fail_when_armed", [a], name="the_bad_one")[0]
    c = g.sigmoid(b, name="after")
    g.output("y", c)
    plan = g.compile([dev, "host"], placement={"before": dev, "the_bad_one": "host", "after": dev})
    xv = rng.standard_normal(8).astype(np.float32)
    _Fails.armed = True
    with pytest.raises(dl.GraphError, match="the_bad_one") as info:
        plan(x=xv)
    assert "armed op exploded" in str(info.value)
    _Fails.armed = False
    close(plan(x=xv)["y"], 1 / (1 + np.exp(-2 * np.maximum(xv.astype(np.float64), 0))))


def test_concurrent_runs_of_one_plan_are_refused(rng):
    g = dl.Graph()
    x = g.input("x", (8,))
    g.output("y", g.apply("test_fail_when_armed", [g.relu(x)])[0])
    plan = g.compile(["host"])
    gate, entered = threading.Event(), threading.Event()
    original = _Fails.reference

    def slow(self, inputs, attrs):
        entered.set()
        gate.wait(10)
        return [inputs[0] * 2]

    _Fails.reference = slow
    try:
        t = threading.Thread(target=lambda: plan(x=np.ones(8, np.float32)))
        t.start()
        assert entered.wait(10)
        with pytest.raises(dl.GraphError, match="already running"):
            plan(x=np.ones(8, np.float32))
        gate.set()
        t.join(10)
    finally:
        _Fails.reference = original
        gate.set()


def test_placement_is_explained_and_strict_refuses(rng):
    g = dl.Graph()
    x = g.input("x", (16,), np.float16)
    g.output("y", g.relu(x, name="half_relu"))
    no_half = [d.id for d in dl.devices() if "float16" not in d.info.dtypes]
    if not no_half:
        pytest.skip("every device has float16")
    with pytest.raises(dl.GraphError, match="half_relu"):
        g.compile([no_half[0], "host"], placement={"half_relu": no_half[0]}, strict=True)
    plan = g.compile([no_half[0], "host"], placement={"half_relu": no_half[0]})
    row = plan.placement_table()[0]
    assert row["device"] == "host" and "asked for" in row["why"] and "float16" in row["why"]
    with pytest.raises(dl.GraphError, match="strict"):
        g.compile([no_half[0], "host"], strict=True)
    xv = rng.standard_normal(16).astype(np.float16)
    np.testing.assert_array_equal(plan(x=xv)["y"], np.maximum(xv, 0))


def test_graph_misuse():
    g = dl.Graph()
    x = g.input("x", (4, 4))
    with pytest.raises(dl.InvalidArgument, match="relu"):
        g.relu(x, alpha=3)
    with pytest.raises(dl.GraphError, match="already exists"):
        g.input("x", (2,))
    with pytest.raises(dl.GraphError, match="no outputs"):
        g.compile(["host"])
    other = dl.Graph()
    with pytest.raises(dl.GraphError, match="another graph"):
        g.relu(other.input("z", (1,)))
    g.output("y", g.relu(x))
    plan = g.compile(["host"])
    with pytest.raises(dl.InvalidArgument, match="missing"):
        plan()
    with pytest.raises(dl.InvalidArgument, match="unknown"):
        plan(x=np.ones((4, 4), np.float32), z=1)
    with pytest.raises(dl.InvalidArgument, match="rank"):
        plan(x=np.ones(4, np.float32))
    with pytest.raises(dl.GraphError, match="placement"):
        g.compile(["host"], placement={"no_such_node": "host"})
    with pytest.raises(dl.GraphError, match="policy"):
        g.compile(["host"], policy="random")
    g.relu(x)
    with pytest.raises(dl.GraphError, match="changed"):
        plan(x=np.ones((4, 4), np.float32))


def test_run_on_device_tensors_is_zero_copy(rng):
    dev = dl.devices()[0]
    g = dl.Graph()
    x = g.input("x", (50,))
    g.output("y", g.relu(x))
    plan = g.compile([dev])
    xv = rng.standard_normal(50).astype(np.float32)
    xt = dl.tensor(xv, dev)
    out = plan.run({"x": xt})["y"]
    assert out.device is dev
    np.testing.assert_array_equal(out.numpy(), np.maximum(xv, 0))
    np.testing.assert_array_equal(xt.numpy(), xv)  # the input is never overwritten


def test_profile_trace_and_gantt(tmp_path, rng):
    import json

    g = dl.Graph()
    x = g.input("x", (2000,))
    y = x
    for op in ["relu", "sigmoid", "tanh"]:
        y = getattr(g, op)(y)
    g.output("y", y)
    plan = g.compile(ALL[:2], policy="spread", fuse=False)  # one profile record per node as written
    plan(x=rng.standard_normal(2000).astype(np.float32), profile=True)
    prof = plan.last_profile
    assert [r["op"] for r in prof] == ["relu", "sigmoid", "tanh"]
    assert all(r["device_us"] >= 0 and r["host_us"] > 0 for r in prof)
    doc = json.loads(plan.trace(tmp_path / "t.json").read_text())
    assert sum(1 for e in doc["traceEvents"] if e["ph"] == "X") == 6
    png = plan.gantt(tmp_path / "g.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("dev", ALL)
def test_views_of_inputs_and_outputs(dev):
    """Reshape-family views reading a graph input, or a value that is also an output, and views returned as outputs."""
    xv = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    g = dl.Graph()
    x = g.input("x", (2, 3))
    a = g.relu(x)
    g.output("a", a)
    g.output("viewed_input", g.neg(g.reshape(x, shape=(3, 2))))
    g.output("viewed_output", g.neg(g.reshape(a, shape=(6,))))
    g.output("flat", g.flatten(x))
    plan = g.compile([dev])
    for _ in range(2):  # the second run reuses the arena: nothing may alias freed or reused memory
        out = plan(x=xv)
        np.testing.assert_array_equal(out["a"], np.maximum(xv, 0))
        np.testing.assert_array_equal(out["viewed_input"], -xv.reshape(3, 2))
        np.testing.assert_array_equal(out["viewed_output"], -np.maximum(xv, 0).reshape(6))
        np.testing.assert_array_equal(out["flat"], xv.reshape(2, 3))


def test_placement_respects_the_largest_buffer_a_device_allows():
    small = [d for d in dl.devices() if d.info.max_allocation < (1 << 40)]
    if not small:
        pytest.skip("no device with a small allocation limit")
    dev = min(small, key=lambda d: d.info.max_allocation)
    n = dev.info.max_allocation // 4 + 16  # float32 elements: just over the limit
    g = dl.Graph()
    x = g.input("x", (n,))
    g.output("y", g.relu(x, name="big"))
    plan = g.compile([dev, "host"]) if dev.id != "host" else None
    if plan is not None:
        row = plan.placement_table()[0]
        assert row["device"] == "host" and "allows at most" in row["why"]
        with pytest.raises(dl.GraphError, match="allows at most"):
            g.compile([dev, "host"], strict=True)


@pytest.mark.parametrize("dev", ALL)
def test_a_dropped_plan_frees_its_memory(dev):
    import gc

    from devicelayer.reclaim import drain

    pool = dl.device(dev).pool
    gc.collect()
    drain(10)  # what earlier tests dropped is released first, or it would be counted as this plan's
    dl.device(dev).synchronize()
    before = pool.live_buffers
    g = dl.Graph()
    x = g.input("x", (256,))
    g.output("y", g.tanh(g.mul(g.relu(x), g.constant(np.full(256, 2, np.float32)))))
    plan = g.compile([dev])
    plan(x=np.ones(256, np.float32))
    assert pool.live_buffers > before
    del plan
    gc.collect()
    dl.device(dev).synchronize()
    deadline = __import__("time").time() + 10
    while pool.live_buffers != before and __import__("time").time() < deadline:
        __import__("time").sleep(0.01)
    assert pool.live_buffers == before


@pytest.mark.parametrize("a,b", PAIRS, ids=[f"{a}+{b}" for a, b in PAIRS])
def test_transfers_into_a_reused_arena_slot_wait_for_its_readers(a, b, rng):
    """Two values copied from a to b share one arena slot on b (disjoint lifetimes); the second copy is run by
    another queue than b's own, and must not overwrite the first before b's node has read it."""
    g = dl.Graph()
    x = g.input("x", (1,))
    first = g.relu(x, name="first")
    second = g.add(x, x, name="second")
    read_first = g.relu(first, name="read_first")
    g.output("y", g.add(second, read_first, name="join"))
    plan = g.compile([a, b], placement={"first": a, "second": a, "read_first": b, "join": b})
    for _ in range(3):
        xv = rng.uniform(0.1, 2, 1).astype(np.float32)
        close(plan(x=xv)["y"], 3 * xv.astype(np.float64))


def test_every_op_has_a_builder_method():
    g = dl.Graph()
    x = g.input("x", (3,))
    for name in OPS:
        assert getattr(g, name).__name__ == name, f"Graph.{name} is not the {name} op's builder"
    y = g.add(x, x)
    assert y.producer.op == "add"

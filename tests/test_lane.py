"""The steady-state path of NumPy runs (graph/lane.py): runs with inputs of the types of a run just checked skip
the checks and lookups, on every device, and stay right; every other run is checked and raises as before."""

from __future__ import annotations

import threading
import types

import numpy as np
import pytest

import devicelayer as dl
import devicelayer.graph.dynamic as dynamic
import devicelayer.graph.plan as plan_module
from devicelayer.errors import GraphError, InvalidArgument

_SHAPE = (6, 8)


def _graph(rng):
    g = dl.Graph()
    x = g.input("x", _SHAPE)
    b = g.input("b", (1, 5))
    w = (rng.standard_normal((8, 5)) / 3).astype(np.float32)
    g.output("y", g.relu(g.add(g.matmul(x, g.constant(w)), b)))
    g.output("s", g.mul(x, x))
    return g, w


def _want(w, x, b):
    x64 = x.astype(np.float64)
    return {"y": np.maximum(x64 @ w.astype(np.float64) + b, 0), "s": x64 * x64}


def _feeds(rng, shape=_SHAPE):
    return {"x": rng.standard_normal(shape).astype(np.float32), "b": rng.standard_normal((1, 5)).astype(np.float32)}


def _check(got, want):
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)


def _counting(monkeypatch, module, name):
    calls = []
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(name)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_numpy_runs_of_one_type_take_the_lane_and_each_result_is_its_own(device, rng, monkeypatch):
    g, w = _graph(rng)
    plan = g.compile([device])
    checked = _counting(monkeypatch, plan_module, "check_feeds")
    try:
        runs = [_feeds(rng) for _ in range(6)]
        results = [plan.run_numpy(feeds) for feeds in runs]
        assert len(checked) == 1  # the first run only: the others took the lane
        for feeds, got in zip(runs, results):  # (a later run wrote none of an earlier run's results)
            _check(got, _want(w, feeds["x"], feeds["b"]))
        assert len({id(r["y"]) for r in results}) == 6
        got = plan.run_numpy(types.MappingProxyType(runs[0]))  # any mapping
        _check(got, _want(w, runs[0]["x"], runs[0]["b"]))
        assert len(checked) == 1
    finally:
        plan.release()


def test_runs_off_the_lane_are_checked_as_before_and_the_lane_still_serves(device, rng, monkeypatch):
    g, w = _graph(rng)
    plan = g.compile([device])
    try:
        feeds = _feeds(rng)
        _check(plan.run_numpy(feeds), _want(w, feeds["x"], feeds["b"]))
        with pytest.raises(InvalidArgument, match="missing"):
            plan.run_numpy({"x": feeds["x"]})
        with pytest.raises(InvalidArgument, match="unknown"):
            plan.run_numpy({**feeds, "z": feeds["x"]})
        with pytest.raises(InvalidArgument, match="rank"):
            plan.run_numpy({"x": feeds["x"].reshape(-1), "b": feeds["b"]})
        with pytest.raises(InvalidArgument):
            plan.run_numpy({"x": feeds["x"] * 1j, "b": feeds["b"]})
        with pytest.raises(InvalidArgument):
            plan.run_numpy([feeds["x"], feeds["b"]])
        # converted or copied on the full path, as before: float64, a transposed view, nested lists
        x64 = rng.standard_normal(_SHAPE)
        _check(plan.run_numpy({"x": x64, "b": feeds["b"]}), _want(w, x64.astype(np.float32), feeds["b"]))
        xt = np.ascontiguousarray(rng.standard_normal(_SHAPE[::-1]).astype(np.float32)).T
        _check(plan.run_numpy({"x": xt, "b": feeds["b"]}), _want(w, xt, feeds["b"]))
        _check(plan.run_numpy({"x": xt.tolist(), "b": feeds["b"]}), _want(w, xt, feeds["b"]))
        checked = _counting(monkeypatch, plan_module, "check_feeds")
        for _ in range(3):
            feeds = _feeds(rng)
            _check(plan.run_numpy(feeds), _want(w, feeds["x"], feeds["b"]))
        assert len(checked) == 1
    finally:
        plan.release()


def test_the_lane_refuses_what_the_full_path_refuses(device, rng):
    g, w = _graph(rng)
    plan = g.compile([device])
    try:
        feeds = _feeds(rng)
        plan.run_numpy(feeds)
        plan.run_numpy(feeds)
        other = threading.Thread(target=plan._busy.claim)  # (another thread's run in flight)
        other.start()
        other.join()
        try:
            with pytest.raises(GraphError, match="already running"):
                plan.run_numpy(feeds)
        finally:
            plan._busy.release()
        _check(plan.run_numpy(feeds, profile=True), _want(w, feeds["x"], feeds["b"]))
        assert plan.last_profile
        _check(plan.run_numpy(feeds), _want(w, feeds["x"], feeds["b"]))
        plan.release()  # a released plan prepares again: its lane is not reused
        feeds = _feeds(rng)
        _check(plan.run_numpy(feeds), _want(w, feeds["x"], feeds["b"]))
        _check(plan.run_numpy(feeds), _want(w, feeds["x"], feeds["b"]))
        g.relu(g.inputs[0])  # the graph changed after compiling
        with pytest.raises(GraphError, match="changed"):
            plan.run_numpy(feeds)
    finally:
        plan.release()


def test_a_lane_run_that_fails_names_the_node_as_the_full_path_does(device, rng):
    g = dl.Graph()
    data = g.constant(rng.standard_normal((5, 3)).astype(np.float32))
    idx = g.input("i", (4,), np.int64)
    g.output("y", g.gather(data, idx, axis=0))
    plan = g.compile([device])
    try:
        good = np.array([0, 4, 2, 1], np.int64)
        for _ in range(2):
            np.testing.assert_array_equal(plan.run_numpy({"i": good})["y"], plan.run_numpy({"i": good})["y"])
        for _ in range(2):  # (the second bad run goes through the lane)
            with pytest.raises(InvalidArgument, match="gather"):
                plan.run_numpy({"i": np.array([0, 9, 2, 1], np.int64)})
        assert plan.run_numpy({"i": good})["y"].shape == (4, 3)
    finally:
        plan.release()


def test_concurrent_threads_on_their_own_plans_each_get_their_own_results(device, rng):
    g, w = _graph(rng)
    plans = [g.compile([device]) for _ in range(2)]
    errors: list[BaseException] = []

    def work(plan, seed):
        r = np.random.default_rng(seed)
        try:
            for _ in range(20):
                feeds = _feeds(r)
                _check(plan.run_numpy(feeds), _want(w, feeds["x"], feeds["b"]))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(p, k)) for k, p in enumerate(plans)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for p in plans:
        p.release()
    assert not errors, errors[0]


# -- models of symbolic shapes --------------------------------------------------------------------------------------
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import devicelayer.onnx as dlo  # noqa: E402
from devicelayer.onnx.testing import onnxruntime_run  # noqa: E402


def _model(rng):
    """y = relu(x @ W + B) over a symbolic batch; c a constant output; z passes an input through."""
    w = rng.standard_normal((8, 4)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "bias"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"]), helper.make_node("Identity", ["k"], ["z"]),
             helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.arange(3, dtype=np.int64)))]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8]),
                     helper.make_tensor_value_info("k", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4]),
         helper.make_tensor_value_info("c", TensorProto.INT64, [3]),
         helper.make_tensor_value_info("z", TensorProto.INT64, [2])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "bias")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_model_of_symbolic_shapes_takes_the_lane_per_shape_and_stays_right(device, rng, monkeypatch):
    model = _model(rng)
    plan = dlo.load(model).compile([device])
    checked = _counting(monkeypatch, dynamic, "check_inputs")
    try:
        for n in (2, 2, 2, 5, 5, 2, 1, 1):
            feeds = {"x": rng.standard_normal((n, 8)).astype(np.float32), "k": rng.integers(-9, 9, 2)}
            got = plan.run_numpy(feeds)
            want = onnxruntime_run(model, feeds)
            assert set(got) == set(want) and got["y"].shape == (n, 4)
            np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(got["c"], want["c"])
            np.testing.assert_array_equal(got["z"], feeds["k"])
        assert len(checked) == 4  # one per change of shape: 2, 5, 2, 1
        with pytest.raises(InvalidArgument):
            plan.run_numpy({"x": np.ma.masked_array(feeds["x"]), "k": feeds["k"]})
        with pytest.raises(InvalidArgument, match="int64"):
            plan.run_numpy({"x": feeds["x"], "k": feeds["k"].astype(np.int32)})
        with pytest.raises(InvalidArgument, match="fixed"):
            plan.run_numpy({"x": feeds["x"], "k": np.zeros(3, np.int64)})
        got = plan.run_numpy(feeds)
        np.testing.assert_array_equal(got["z"], feeds["k"])
    finally:
        plan.release()

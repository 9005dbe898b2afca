"""One loaded model, every input shape its graph allows: symbolic dimensions, shape arithmetic evaluated per
signature, parameters read at run time, data-dependent cuts, control flow; on every device, against
onnxruntime on the same model and inputs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import devicelayer as dl

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

import devicelayer.onnx as dlo  # noqa: E402
from devicelayer.onnx.testing import make_model, onnxruntime_run  # noqa: E402


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def i64(*v):
    return np.array(v, dtype=np.int64)


def _same(plan, model, feeds, tol=1e-5):
    got = plan(**feeds)
    want = onnxruntime_run(model, feeds)
    assert list(got) == list(want)
    for name, w in want.items():
        g = got[name]
        assert g.shape == w.shape and g.dtype == w.dtype, name
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=name)
    return got


def _attention_reshape_model():
    """The exporters' pattern: Shape -> Gather -> Unsqueeze -> Concat -> Reshape of a dynamic batch and length
    (a Whisper-like encoder splitting heads), then a MatMul and the inverse reshape."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["s", "i1"], ["t"], axis=0),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["bu"]),
        helper.make_node("Unsqueeze", ["t", "ax0"], ["tu"]),
        helper.make_node("Concat", ["bu", "tu", "heads", "hd"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["h"]),
        helper.make_node("Transpose", ["h"], ["ht"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["ht", "w"], ["m"]),
        helper.make_node("Transpose", ["m"], ["mt"], perm=[0, 2, 1, 3]),
        helper.make_node("Shape", ["x"], ["s2"]),
        helper.make_node("Reshape", ["mt", "s2"], ["y"]),
    ]
    rng = np.random.default_rng(3)
    inits = {"i0": np.array(0, np.int64), "i1": np.array(1, np.int64), "ax0": i64(0), "heads": i64(2),
             "hd": i64(4), "w": f32(rng, 4, 4)}
    return make_model(nodes, {"x": f32(rng, 1, 5, 8)}, ["y"], inits, opset=13, dynamic={"x": ["batch", "time", 8]})


def test_symbolic_dims_serve_every_shape_with_one_plan(device, rng):
    model = _attention_reshape_model()
    loaded = dlo.load(model)
    assert loaded.inputs[0].dims == ("batch", "time", 8)
    plan = loaded.compile([device.id])
    for b, t in ((1, 5), (2, 5), (3, 7), (1, 5)):
        _same(plan, model, {"x": f32(rng, b, t, 8)})
    info = plan.cache_info()
    assert info["misses"] == 3 and info["hits"] == 1
    assert "specialisations: 3 cached" in plan.placement_report()


def test_the_cache_is_bounded_least_recently_used_first_out(rng):
    model = _attention_reshape_model()
    plan = dlo.load(model).compile(["host"], cache_size=2)
    for t in (3, 4, 5, 3):
        _same(plan, model, {"x": f32(rng, 1, t, 8)})
    info = plan.cache_info()
    assert info["size"] == 2 and info["evictions"] == 2 and info["misses"] == 4
    _same(plan, model, {"x": f32(rng, 1, 3, 8)})  # the most recent two stay: 3 and 5
    assert plan.cache_info()["hits"] == 1
    with pytest.raises(dl.InvalidArgument, match="cache_size"):
        dlo.load(model).compile(["host"], cache_size=0)


def test_weights_are_shared_by_every_specialisation(rng):
    model = _attention_reshape_model()
    plan = dlo.load(model).compile(["host"])
    plan(x=f32(rng, 1, 5, 8))
    held = plan.constants.nbytes
    for t in (2, 3, 4):
        plan(x=f32(rng, 2, t, 8))
    assert plan.constants.nbytes == held and held > 0
    plan.release()
    assert plan.constants.nbytes == 0


def test_a_parameter_fed_as_a_graph_input_is_read_per_value(device, rng):
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
    x = f32(rng, 2, 3, 4)
    model = make_model(nodes, {"x": x, "shape": i64(6, 4)}, ["y"], opset=13)
    plan = dlo.load(model).compile([device.id])
    for shape in (i64(6, 4), i64(4, 6), i64(-1, 2), i64(6, 4)):
        got = plan(x=x, shape=shape)["y"]
        np.testing.assert_array_equal(got, np.maximum(x.reshape(shape), 0))
    assert plan.cache_info()["misses"] == 3


def test_a_shape_computed_from_data_splits_the_plan(device, rng):
    """The target shape is a tensor computed on the device (a ReduceMax of an int tensor): the plan runs up to
    it, reads it on the host and goes on; the report says where it waited."""
    nodes = [helper.make_node("ReduceMax", ["n"], ["m"], keepdims=1),
             helper.make_node("Concat", ["m", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["r"]),
             helper.make_node("Sigmoid", ["r"], ["y"])]
    x = f32(rng, 4, 6)
    model = make_model(nodes, {"x": x, "n": i64(1, 2)}, ["y"], {"minus1": i64(-1)}, opset=13)
    plan = dlo.load(model).compile([device.id])
    for n in (i64(1, 2), i64(3, 1), i64(8, 2), i64(1, 2)):
        _same(plan, model, {"x": x, "n": n})
    waits = plan.waits_report()
    assert waits and waits[0]["count"] == 4 and waits[0]["kind"] == "values"
    assert "host wait" in plan.placement_report()


def _if_model(x):
    then = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["t_out"])], "then", [],
                             [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, list(x.shape))],
                             [onnx.numpy_helper.from_array(np.array(2, np.float32), "two")])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e_out"])], "else", [],
                              [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, list(x.shape))])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    return make_model(nodes, {"x": x}, ["y"], {"zero": np.array(0, np.float32)}, opset=13)


def test_if_with_a_condition_from_data_takes_either_branch(device, rng):
    x = f32(rng, 3, 4)
    model = _if_model(x)
    plan = dlo.load(model).compile([device.id])
    for sign in (1, -1, 1):
        _same(plan, model, {"x": np.abs(x) * sign})
    assert plan.cache_info()["misses"] == 3  # the first segment, then one per branch


def test_a_loop_whose_condition_is_data_runs_its_body_as_a_plan(device):
    """while x < limit: x = x * 2 (the condition computed by the body), with a scan output per iteration."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["x_in", "two"], ["x_out"]),
         helper.make_node("ReduceMax", ["x_out"], ["mx"], keepdims=0),
         helper.make_node("Less", ["mx", "limit"], ["c_out"]),
         helper.make_node("Identity", ["x_out"], ["scan"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_in", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_out", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("scan", TensorProto.FLOAT, [3])],
        [onnx.numpy_helper.from_array(np.array(2, np.float32), "two")])
    nodes = [helper.make_node("Loop", ["", "cond", "x"], ["y", "steps"], body=body)]
    x = np.array([0.5, 1.0, 1.5], np.float32)
    model = make_model(nodes, {"cond": np.array(True), "x": x, "limit": np.array(10, np.float32)}, ["y", "steps"],
                       opset=13)
    plan = dlo.load(model).compile([device.id])
    for limit in (10, 40):
        got = _same(plan, model, {"cond": np.array(True), "x": x, "limit": np.array(limit, np.float32)})
        assert got["steps"].shape[0] == int(np.ceil(np.log2(limit / 1.5)))


def test_a_loop_with_a_known_trip_count_is_unrolled(device, rng):
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "x"], ["acc_out"]), helper.make_node("Identity", ["c_in"], ["c_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [2, 3])])
    nodes = [helper.make_node("Loop", ["m", "", "z"], ["y"], body=body)]
    x, z = f32(rng, 2, 3), f32(rng, 2, 3)
    model = make_model(nodes, {"x": x, "z": z}, ["y"], {"m": np.array(4, np.int64)}, opset=13)
    loaded = dlo.load(model)
    assert [n.op for n in loaded.graph().needed()] == ["add"] * 4  # every iteration inlined, no driver
    _same(loaded.compile([device.id]), model, {"x": x, "z": z})


def test_scan_is_unrolled_over_the_sequence(device, rng):
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["y_t"])],
        "body",
        [helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("x_t", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("y_t", TensorProto.FLOAT, [2])])
    nodes = [helper.make_node("Scan", ["s0", "x"], ["s", "ys"], body=body, num_scan_inputs=1,
                              scan_input_directions=[1])]
    feeds = {"s0": f32(rng, 2), "x": f32(rng, 5, 2)}
    model = make_model(nodes, feeds, ["s", "ys"], opset=11)
    _same(dlo.load(model).compile([device.id]), model, feeds)


# -- the loader's bugs with shapes -------------------------------------------------------------------------------------
def test_a_0d_constant_stays_0d(device, rng):
    """Size gives a 0-d tensor and a scalar Gather index drops the gathered axis (ViT and SSD exports)."""
    x = f32(rng, 3, 4)
    nodes = [helper.make_node("Size", ["x"], ["n"]), helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
             helper.make_node("Gather", ["x", "idx"], ["row"], axis=0),
             helper.make_node("Mul", ["row", "nf"], ["y"])]
    model = make_model(nodes, {"x": x}, ["y", "n"], {"idx": np.array(1, np.int64)}, opset=13)
    got = _same(dlo.load(model).compile([device.id]), model, {"x": x})
    assert got["n"].shape == () and got["y"].shape == (4,)


def test_a_declared_zero_dimension_is_zero(rng):
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], allowzero=1)]
    x = np.zeros((0, 3), np.float32)
    model = make_model(nodes, {"x": x}, ["y"], {"shape": i64(3, 0)}, opset=14)
    loaded = dlo.load(model)
    assert loaded.inputs[0].dims == (0, 3)
    assert loaded.compile(["host"])(x=x)["y"].shape == (3, 0)


def test_an_ir3_model_whose_initializers_are_not_inputs_loads_with_a_warning(rng):
    x, w = f32(rng, 2, 3), f32(rng, 2, 3)
    model = make_model([helper.make_node("Add", ["x", "w"], ["y"])], {"x": x}, ["y"], {"w": w}, opset=8,
                       ir_version=4)
    model.ir_version = 3  # IR 3 wants every initializer listed as a graph input: the checker refuses this model
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(model)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        loaded = dlo.load(model)
    assert any("breaks the ONNX spec" in str(s.message) for s in seen)
    np.testing.assert_allclose(loaded.compile(["host"])(x=x)["y"], x + w, rtol=1e-6)


# -- bad input -----------------------------------------------------------------------------------------------------------
def test_inputs_that_contradict_the_model_are_refused_naming_the_input(device, rng):
    model = _attention_reshape_model()
    plan = dlo.load(model).compile([device.id])
    with pytest.raises(dl.InvalidArgument, match=r"input 'x' must have shape \('batch', 'time', 8\).*rank 3"):
        plan(x=f32(rng, 2, 5))
    with pytest.raises(dl.InvalidArgument, match=r"dimension 2 is fixed to 8, got \(2, 5, 7\)"):
        plan(x=f32(rng, 2, 5, 7))
    with pytest.raises(dl.InvalidArgument, match="must be float32, got float64"):
        plan(x=np.zeros((2, 5, 8)))
    with pytest.raises(dl.InvalidArgument, match=r"unknown input\(s\) \['X'\]"):
        plan(X=f32(rng, 2, 5, 8))
    with pytest.raises(dl.InvalidArgument, match=r"missing input\(s\) \['x'\]"):
        plan()
    _same(plan, model, {"x": f32(rng, 2, 5, 8)})  # still usable


def test_symbolic_dimensions_shared_by_inputs_must_agree(rng):
    nodes = [helper.make_node("Add", ["a", "b"], ["y"])]
    model = make_model(nodes, {"a": f32(rng, 2, 3), "b": f32(rng, 2, 3)}, ["y"],
                       dynamic={"a": ["n", 3], "b": ["n", 3]})
    plan = dlo.load(model).compile(["host"])
    with pytest.raises(dl.InvalidArgument, match="input 'b' has n = 4.*input 'a' has n = 2"):
        plan(a=f32(rng, 2, 3), b=f32(rng, 4, 3))
    np.testing.assert_allclose(plan(a=np.ones((5, 3), np.float32), b=np.ones((5, 3), np.float32))["y"], 2)


def test_a_runtime_value_that_makes_a_shape_impossible_names_the_node(rng):
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="the_reshape")]
    model = make_model(nodes, {"x": f32(rng, 2, 3), "shape": i64(3, 2)}, ["y"], opset=13)
    plan = dlo.load(model).compile(["host"])
    with pytest.raises(dl.GraphError, match="the_reshape.*reshape"):
        plan(x=f32(rng, 2, 3), shape=i64(4, 2))
    np.testing.assert_array_equal(plan(x=np.ones((2, 3), np.float32), shape=i64(1, 6))["y"], np.ones((1, 6)))


def test_a_host_computation_whose_input_is_read_again_later(device, rng):
    """Two NonZero of one mask (as detectors filter per class): the first splits the plan, and the mask it read
    must still reach the second and the Where after it."""
    nodes = [helper.make_node("Greater", ["x", "t"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["nz0"]),
             helper.make_node("ReduceSum", ["nz0"], ["s0"], keepdims=0),
             helper.make_node("NonZero", ["mask"], ["nz1"]),
             helper.make_node("Where", ["mask", "x", "t"], ["w"])]
    x = f32(rng, 3, 5)
    model = make_model(nodes, {"x": x, "t": np.array(0.1, np.float32)}, ["s0", "nz1", "w"], opset=13)
    plan = dlo.load(model).compile([device.id])
    for _ in range(2):
        _same(plan, model, {"x": f32(rng, 3, 5), "t": np.array(0.1, np.float32)})
    assert any(w["kind"] == "host" for w in plan.waits_report())


def test_constants_fold_with_devicelayers_own_ops():
    """A node of constant inputs is evaluated by the library ops its converter makes (ONNX's reference evaluator
    fails on this GatherElements: it picks among at most 64 rows)."""
    data = np.arange(100, dtype=np.int64)[None]
    idx = np.array([[3, 70, 99, 0, 64, 65, 1]], np.int64)
    nodes = [helper.make_node("GatherElements", ["d", "i"], ["g"], axis=1), helper.make_node("Add", ["g", "x"], ["y"])]
    x = np.ones((1, 7), np.int64)
    model = make_model(nodes, {"x": x}, ["y"], {"d": data, "i": idx}, opset=13)
    got = dlo.load(model).compile(["host"])(x=x)["y"]
    np.testing.assert_array_equal(got, np.take_along_axis(data, idx, 1) + 1)

"""ONNX's random generators (RandomUniform, RandomNormal, their Like forms, Bernoulli, Multinomial) through the
converters on every device: drawn on the device at run time (never folded), deterministic per seed and equal to
the host's draws, with the distribution's moments; misuse names the node.

ONNX's node-suite cases for Bernoulli compare against NumPy's global Mersenne Twister stream, which the model
cannot convey (the spec says implementations may differ even with a seed); onnxruntime does not run them either.
"""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402

import devicelayer.onnx as dlo  # noqa: E402


def _model(op, inputs=None, outputs=("y",), **attrs):
    """A one-node model; ``inputs`` maps names to arrays (graph inputs)."""
    inputs = inputs or {}
    node = helper.make_node(op, list(inputs), list(outputs), name=f"the_{op.lower()}", **attrs)
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for k, v in inputs.items()]
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info(o, 0, None) for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    return onnx.shape_inference.infer_shapes(model)


def _run(model, device, **feeds):
    return dlo.load(model).compile([device.id])(**feeds)


def test_generators_are_library_ops_not_folded_constants():
    g = dlo.convert(dlo.read_model(_model("RandomNormal", shape=[3, 4], seed=1.0)))
    assert [n.op for n in g.nodes] == ["random_normal"]


def test_uniform_is_seeded_in_range_and_equal_to_the_host(device):
    model = _model("RandomUniform", shape=[200, 500], low=-2.0, high=3.0, seed=5.0)
    got = _run(model, device)["y"]
    host = _run(model, dl.device("host"))["y"]
    assert got.shape == (200, 500) and got.dtype == np.float32
    np.testing.assert_allclose(got, host, rtol=1e-6, atol=1e-6)
    assert got.min() >= -2.0 and got.max() < 3.0
    assert abs(got.mean() - 0.5) < 0.02 and abs(got.var() - 25 / 12) < 0.05
    again = _run(model, device)["y"]
    np.testing.assert_array_equal(got, again)
    other = _run(_model("RandomUniform", shape=[200, 500], low=-2.0, high=3.0, seed=6.0), device)["y"]
    assert np.mean(other == got) < 0.01


def test_normal_moments_and_float64(device):
    dtype = TensorProto.DOUBLE if "float64" in device.info.dtypes else TensorProto.FLOAT
    model = _model("RandomNormal", shape=[100000], mean=1.0, scale=2.0, seed=3.0, dtype=dtype)
    try:
        got = _run(model, device)["y"]
    except dl.GraphError as exc:  # a device whose kernel language lacks float64 log/cos
        assert "float64" in str(exc)
        return
    assert got.dtype == helper.tensor_dtype_to_np_dtype(dtype)
    assert abs(got.mean() - 1.0) < 0.03 and abs(got.std() - 2.0) < 0.03
    assert 0.67 < np.mean(np.abs(got - 1.0) < 2.0) < 0.70
    np.testing.assert_allclose(got, _run(model, dl.device("host"))["y"], rtol=1e-5, atol=1e-5)


def test_like_forms_take_shape_and_dtype_from_the_input(device):
    x = np.zeros((3, 7), np.float32)
    y = _run(_model("RandomUniformLike", {"x": x}, seed=1.0), device, x=x)["y"]
    assert y.shape == (3, 7) and y.dtype == np.float32
    y = _run(_model("RandomNormalLike", {"x": x}, seed=1.0, dtype=TensorProto.FLOAT16), device, x=x) \
        if "float16" in device.info.dtypes else None
    if y is not None:
        assert y["y"].dtype == np.float16 and y["y"].shape == (3, 7)


def test_bernoulli_draws_zeros_and_ones_with_probability_p(device):
    p = np.repeat(np.array([0.0, 0.25, 0.9, 1.0], np.float32), 20000).reshape(4, 20000)
    y = _run(_model("Bernoulli", {"p": p}, seed=2.0), device, p=p)["y"]
    assert y.dtype == np.float32 and set(np.unique(y)) <= {0.0, 1.0}
    np.testing.assert_allclose(y.mean(axis=1), [0.0, 0.25, 0.9, 1.0], atol=0.015)
    b = _run(_model("Bernoulli", {"p": p}, seed=2.0, dtype=TensorProto.BOOL), device, p=p)["y"]
    assert b.dtype == np.bool_
    np.testing.assert_array_equal(b, y.astype(bool))


def test_multinomial_follows_the_softmax_of_its_logits(device):
    probs = np.array([[0.1, 0.2, 0.7], [0.5, 0.5, 0.0]], np.float64)
    with np.errstate(divide="ignore"):
        logits = np.log(probs).astype(np.float32)
    y = _run(_model("Multinomial", {"x": logits}, sample_size=30000, seed=4.0, dtype=TensorProto.INT64), device,
             x=logits)["y"]
    assert y.shape == (2, 30000) and y.dtype == np.int64
    for row, want in zip(y, probs):
        np.testing.assert_allclose(np.bincount(row, minlength=3) / row.size, want, atol=0.015)


@pytest.mark.parametrize("op, attrs, inputs, match", [
    ("RandomNormal", {"shape": [2, -3]}, None, "shape"),
    ("RandomUniform", {"shape": [2], "dtype": TensorProto.INT32}, None, "dtype"),
    ("Multinomial", {"sample_size": 0}, {"x": np.zeros((2, 3), np.float32)}, "sample_size"),
    ("Bernoulli", {}, {"x": np.zeros(3, np.int32)}, "floating-point"),
])
def test_misuse_names_the_node_and_leaves_the_device_usable(op, attrs, inputs, match, device):
    node = helper.make_node(op, list(inputs or {}), ["y"], name="bad_gen", **attrs)
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for k, v in (inputs or {}).items()]
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", 1, ["?"])])
    with pytest.raises((dl.GraphError, dl.UnsupportedOp), match=f"bad_gen.*{match}"):
        dlo.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)]))
    assert _run(_model("RandomUniform", shape=[4], seed=0.0), device)["y"].shape == (4,)


def test_graph_builder_forms_draw_the_same_numbers_on_every_device(device):
    """The library ops directly: shape from an input (its values unread) or from ``shape=``; a device draws the
    host's numbers."""
    g = dl.Graph()
    x = g.input("x", (3, 4))
    g.output("u", g.random_uniform(x, seed=3, low=-1.0, high=1.0))
    g.output("n", g.random_normal(shape=(2, 5), seed=1, mean=2.0))
    feeds = {"x": np.zeros((3, 4), np.float32)}
    got, host = g.compile([device.id])(**feeds), g.compile(["host"])(**feeds)
    assert got["u"].shape == (3, 4) and got["n"].shape == (2, 5)
    np.testing.assert_allclose(got["u"], host["u"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["n"], host["n"], rtol=1e-5, atol=1e-5)

"""``compile(..., allow_tf32=True)``: float32 products and convolutions may run TF32 where a device has the units
(CUDA's tensor cores through cuBLAS and cuDNN); everywhere else the results are IEEE float32's, as without it."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl
import devicelayer.onnx as dlo
from devicelayer.kernels.op import OPS, TensorType
from op_cases import graph_reference64


def _graph(rng, dtype=np.float32, half=True):
    """A conv, a gemm and a matmul in float32, and a float16 matmul beside them (with ``half``)."""
    g = dl.Graph()
    x = g.input("x", (2, 8, 12, 12), dtype)
    w = g.constant((rng.standard_normal((16, 8, 3, 3)) / 8).astype(dtype))
    c = g.conv(x, w, pads=[1, 1, 1, 1], activation="relu", name="conv")
    flat = g.reshape(c, shape=[2, -1])
    p = g.gemm(flat, g.constant((rng.standard_normal((16 * 144, 32)) / 48).astype(dtype)), name="gemm")
    g.output("y", g.matmul(p, g.constant((rng.standard_normal((32, 8)) / 6).astype(dtype)), name="matmul"))
    if half:
        h = g.input("h", (4, 16), np.float16)
        g.output("half", g.matmul(h, g.constant(rng.standard_normal((16, 4)).astype(np.float16)), name="half"))
    return g


def _feeds(rng, half=True):
    return {"x": rng.standard_normal((2, 8, 12, 12)).astype(np.float32),
            **({"h": rng.standard_normal((4, 16)).astype(np.float16)} if half else {})}


def _marked(plan):
    return {n.name: n.attrs.get("allow_tf32", False) for n in plan.graph.needed() if n.op in ("conv", "gemm",
                                                                                              "matmul")}


def test_a_plan_allowing_tf32_marks_its_float32_products_and_leaves_the_callers_graph(device, rng):
    half = "float16" in dl.device(device).info.dtypes
    g = _graph(rng, half=half)
    version = g.version
    plan = g.compile([device], allow_tf32=True)
    plain = g.compile([device])
    try:
        marked = _marked(plan)
        assert marked.pop("half", False) is False  # (float16: not marked)
        assert len(marked) == 3 and all(marked.values()), marked
        assert not any(_marked(plain).values())
        assert not any(n.attrs.get("allow_tf32") for n in g.nodes) and g.version == version
        feeds = _feeds(rng, half)
        got, want = plan(**feeds), graph_reference64(g, feeds)
        tf32 = dl.device(device).info.backend == "cuda"  # (the one backend with TF32 units)
        tol = 1e-2 if tf32 else 1e-4
        for name in want:
            scale = max(1.0, float(np.abs(want[name]).max()))
            t = 4e-3 if name == "half" else tol  # (float16 against float64)
            np.testing.assert_allclose(got[name].astype(np.float64), want[name], rtol=t, atol=t * scale)
        if not tf32:  # no TF32 units: bit for bit the plan without it
            same = plain(**feeds)
            for name in want:
                np.testing.assert_array_equal(got[name], same[name])
    finally:
        plan.release()
        plain.release()


@pytest.mark.parametrize("value", [1, "yes", None, np.float32(1)])
def test_allow_tf32_takes_a_bool_only(value, rng):
    g = _graph(rng)
    with pytest.raises(dl.InvalidArgument, match="allow_tf32 must be True or False"):
        g.compile(["host"], allow_tf32=value)
    f = np.dtype(np.float32)
    for op, types in (("matmul", [TensorType((2, 3), f), TensorType((3, 4), f)]),
                      ("conv", [TensorType((1, 2, 5, 5), f), TensorType((3, 2, 3, 3), f)])):
        with pytest.raises(dl.InvalidArgument, match="'allow_tf32' must be True or False"):
            OPS[op].prepare(types, {"allow_tf32": value})


def test_an_onnx_model_compiles_with_allow_tf32(rng, tmp_path):
    from onnx import TensorProto, helper, numpy_helper

    w = (rng.standard_normal((6, 5)) / 3).astype(np.float32)
    node = helper.make_node("MatMul", ["x", "w"], ["y"])
    graph = helper.make_graph([node], "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 5])],
                              [numpy_helper.from_array(w, "w")])
    model = dlo.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    with pytest.raises(dl.InvalidArgument, match="allow_tf32"):
        model.compile(["host"], allow_tf32="no")
    plan = model.compile(["host"], allow_tf32=True)
    assert plan.options["allow_tf32"] is True
    x = rng.standard_normal((3, 6)).astype(np.float32)
    np.testing.assert_allclose(plan.run_numpy({"x": x})["y"], x @ w, rtol=1e-5, atol=1e-5)
    assert [n.attrs.get("allow_tf32") for n in plan.last_segments[0].plan.graph.needed()] == [True]


@pytest.mark.skipif(not any(d.info.backend == "cuda" for d in dl.devices()), reason="no CUDA device present")
def test_cuda_runs_tf32_where_allowed_and_ieee_float32_otherwise(rng):
    """Products of random float32 matrices: with TF32 the error against float64 is TF32's (about 1e-3 relative),
    several times IEEE float32's; without, float32's.  A convolution allowed TF32 runs the algorithm cuDNN's search
    finds fastest, which may be a float32 one: its error is at most TF32's."""
    g = dl.Graph()
    a = g.input("a", (256, 512))
    b = g.constant(rng.standard_normal((512, 384)).astype(np.float32))
    x = g.input("x", (4, 32, 28, 28))
    w = g.constant(rng.standard_normal((64, 32, 3, 3)).astype(np.float32))
    g.output("mm", g.matmul(a, b))
    g.output("conv", g.conv(x, w, pads=[1, 1, 1, 1]))
    feeds = {"a": rng.standard_normal((256, 512)).astype(np.float32),
             "x": rng.standard_normal((4, 32, 28, 28)).astype(np.float32)}
    want = graph_reference64(g, feeds)
    errors = {}
    for tf32 in (False, True):
        plan = g.compile(["cuda:0"], allow_tf32=tf32)
        try:
            got = plan(**feeds)
        finally:
            plan.release()
        errors[tf32] = {k: float(np.abs(got[k] - want[k]).max() / np.abs(want[k]).max()) for k in want}
    for k in want:
        assert errors[False][k] < 2e-6, errors
        assert errors[True][k] < 1e-2, errors
    assert errors[True]["mm"] > 2e-5, errors

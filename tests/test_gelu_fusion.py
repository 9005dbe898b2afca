"""GELU written out as x / sqrt(2), erf, + 1 and the product with x and 0.5 becomes one gelu node when compiled
(devicelayer/graph/patterns.py), in every order PyTorch's exporters write the product, and only where the chain is
exactly that."""

from __future__ import annotations

import math

import numpy as np
import pytest

import devicelayer as dl


def _gelu_chain(order, shape=(2, 3, 70), scale="div", one=1.0, half=0.5, reader=False, mid_output=False,
                f=np.float32):
    g = dl.Graph()
    x = g.neg(g.input("x", shape, f))
    s = g.div(x, g.constant(f(math.sqrt(2)))) if scale == "div" else g.mul(x, g.constant(f(1 / math.sqrt(2))))
    e = g.add(g.erf(s), g.constant(f(one)))
    if mid_output:
        g.output("mid", e)
    if reader:
        g.output("r", g.neg(e))
    if order == "x_e_half":
        y = g.mul(g.mul(x, e), g.constant(f(half)))
    elif order == "e_half_x":
        y = g.mul(g.mul(e, g.constant(f(half))), x)
    else:
        y = g.mul(g.mul(x, g.constant(f(half))), e)
    g.output("y", g.sigmoid(y))
    return g


def _gelu_found(plan) -> bool:
    """Whether the plan runs a gelu op: alone, or as a step of the pointwise chain around it (the negation before,
    the sigmoid after)."""
    return any(n.op == "gelu" or (n.op == "fused_elementwise" and any(s[0] == "gelu" for s in n.attrs["steps"]))
               for n in plan.graph.nodes)


@pytest.mark.parametrize("order", ["x_e_half", "e_half_x", "x_half_e"])
@pytest.mark.parametrize("scale", ["div", "mul"])
def test_an_erf_gelu_chain_becomes_one_gelu(order, scale, rng):
    g = _gelu_chain(order, scale=scale)
    fused, plain = g.compile(["host"]), g.compile(["host"], fuse=False)
    assert _gelu_found(fused) and not _gelu_found(plain)
    feeds = {"x": rng.standard_normal((2, 3, 70)).astype(np.float32) * 3}
    want, got = plain(**feeds)["y"], fused(**feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["one", "half", "reader", "mid_output"])
def test_what_is_not_exactly_gelu_stays(kind):
    g = _gelu_chain("x_e_half", one=2.0 if kind == "one" else 1.0, half=0.25 if kind == "half" else 0.5,
                    reader=kind == "reader", mid_output=kind == "mid_output")
    assert not _gelu_found(g.compile(["host"]))


@pytest.mark.parametrize("scale", ["div", "mul"])
def test_a_float16_chain_whose_constants_are_float16_roundings_becomes_one_gelu(scale, rng):
    """A float16 model holds sqrt(2) as 1.4140625 (1e-4 off): still GELU, computed in float32 as one op."""
    g = _gelu_chain("x_e_half", scale=scale, f=np.float16)
    fused = g.compile(["host"])
    assert _gelu_found(fused)
    feeds = {"x": (rng.standard_normal((2, 3, 70)) * 3).astype(np.float16)}
    x = -feeds["x"].astype(np.float64)
    gelu = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    np.testing.assert_allclose(fused(**feeds)["y"].astype(np.float64), 1 / (1 + np.exp(-gelu)), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("scale", ["div", "mul"])
def test_a_bfloat16_chain_becomes_one_gelu(scale, rng):
    """A bfloat16 model holds sqrt(2) as 1.4140625 too (its unit is 2**-7): still GELU, computed in float32."""
    bf16 = dl.dtypes.dtype("bfloat16")
    g = _gelu_chain("x_e_half", scale=scale, f=bf16.type)
    fused = g.compile(["host"])
    assert _gelu_found(fused)
    feeds = {"x": (rng.standard_normal((2, 3, 70)) * 3).astype(bf16)}
    x = -feeds["x"].astype(np.float64)
    gelu = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    got = fused(**feeds)["y"]
    assert got.dtype == bf16
    np.testing.assert_allclose(got.astype(np.float64), 1 / (1 + np.exp(-gelu)), rtol=1e-2, atol=1e-2)


def test_a_bfloat16_constant_one_unit_off_is_not_gelu():
    bf16 = dl.dtypes.dtype("bfloat16").type
    half = float(bf16(0.5 + 2 ** -8))  # the next bfloat16 above 0.5
    assert half != 0.5
    assert not _gelu_found(_gelu_chain("x_e_half", half=half, f=bf16).compile(["host"]))


def test_a_float16_constant_one_unit_off_is_not_gelu():
    half = float(np.nextafter(np.float16(0.5), np.float16(1)))  # 0.50049
    assert not _gelu_found(_gelu_chain("x_e_half", half=half, f=np.float16).compile(["host"]))


def test_a_gelu_fuses_with_the_pointwise_chain_around_it(device, rng):
    """neg, the GELU chain and sigmoid: on a kernel device one fused kernel whose steps are the negation, gelu and
    sigmoid; on the host gelu stays one op (oneDNN's, where a chain would run NumPy's)."""
    plan = _gelu_chain("x_e_half").compile([device])
    try:
        ops = [n.op for n in plan.graph.nodes]
        if device.info.kernel_language == "python":
            assert "gelu" in ops and "fused gelu of 5 nodes" in plan.placement_report()
        else:
            [node] = plan.graph.nodes
            assert node.op == "fused_elementwise" and [s[0] for s in node.attrs["steps"]] == ["neg", "gelu", "sigmoid"]
            assert "fused elementwise of 7 nodes" in plan.placement_report()
        x = rng.standard_normal((2, 3, 70)).astype(np.float32) * 3
        gelu = 0.5 * -x * (1 + np.vectorize(math.erf)(-x / math.sqrt(2)))
        np.testing.assert_allclose(plan(x=x)["y"], 1 / (1 + np.exp(-gelu)), rtol=1e-5, atol=1e-6)
    finally:
        plan.release()


def test_a_bias_on_a_product_stays_the_products_and_gelu_follows(device, rng):
    """matmul, + bias, GELU: the bias stays with the product (its epilogue: a vendor library adds it in the
    product's own call), not in a chain with the gelu after it."""
    g = dl.Graph()
    x = g.input("x", (4, 64, 48))
    z = g.add(g.matmul(x, g.constant((rng.standard_normal((48, 96)) / 7).astype(np.float32))),
              g.constant(rng.standard_normal(96).astype(np.float32)))
    s = g.div(z, g.constant(np.float32(math.sqrt(2))))
    g.output("y", g.mul(g.mul(z, g.add(g.erf(s), g.constant(np.float32(1)))), g.constant(np.float32(0.5))))
    plan = g.compile([device])
    try:
        assert _gelu_found(plan)
        for n in plan.graph.nodes:
            steps = [s[0] for s in n.attrs.get("steps", ())]
            assert not ("add" in steps and "gelu" in steps), n
        feeds = {"x": rng.standard_normal((4, 64, 48)).astype(np.float32)}
        want = g.compile([device], fuse=False)(**feeds)["y"]
        np.testing.assert_allclose(plan(**feeds)["y"], want, rtol=1e-4, atol=1e-5)
    finally:
        plan.release()

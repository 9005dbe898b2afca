"""Small float32 matmuls with an epilogue on the host: oneDNN's matmul with the chain as its post-ops
(``backends/host/gemm.py``) where every step is one, NumPy's product and steps where a step is not; each against
float64, outputs poisoned by a NaN run first."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.backends.host import dnnl as host_dnnl
from devicelayer.backends.host.dnnl_layers import MatmulLayer
from devicelayer.backends.host.gemm import post_ops
from devicelayer.kernels.op import TensorType

from test_fusion import close, poisoned_run, reference64

pytestmark = pytest.mark.skipif(host_dnnl.library() is None, reason="oneDNN is not installed")

F32 = np.float32


@pytest.fixture
def fused(monkeypatch):
    """The oneDNN matmul layers bound while the test runs (one per fused product call)."""
    bound = []
    real = MatmulLayer.bind

    def counting(self, *operands, **kw):
        bound.append(self)
        return real(self, *operands, **kw)
    monkeypatch.setattr(MatmulLayer, "bind", counting)
    return bound


def _extras(g, rng, m, n):
    c = lambda a: g.constant(np.asarray(a, F32))  # noqa: E731
    return {"bias": c(rng.standard_normal(n)), "row": c(rng.standard_normal((m, n))),
            "scalar": c(rng.uniform(0.5, 2.0)), "resid": g.input("r", (2, m, n)), "one": c([rng.uniform(1, 3)])}


#: chains oneDNN applies as post-ops
POST = {
    "bias": lambda g, p, e: g.add(p, e["bias"]),
    "bias first": lambda g, p, e: g.add(e["bias"], p),
    "bias then scale": lambda g, p, e: g.mul(g.add(p, e["bias"]), e["scalar"]),
    "residual then tanh": lambda g, p, e: g.tanh(g.add(p, e["resid"])),
    "sub then div": lambda g, p, e: g.div(g.sub(p, e["row"]), e["one"]),
    "bias then swish": lambda g, p, e: g.swish(g.add(p, e["bias"])),
    "sigmoid then tanh": lambda g, p, e: g.tanh(g.sigmoid(p)),
    "leaky relu then residual": lambda g, p, e: g.add(g.leaky_relu(p, alpha=0.1), e["resid"]),
}
#: chains that keep NumPy's steps: the running value second in a sub, read twice, a max, ops oneDNN takes otherwise
#: at a NaN or an infinity (ReLU, GELU)
NOT_POST = {
    "bias minus product": lambda g, p, e: g.sub(e["bias"], g.elu(p)),
    "bias then relu": lambda g, p, e: g.relu(g.add(p, e["bias"])),
    "bias then gelu": lambda g, p, e: g.gelu(g.add(p, e["bias"])),
    "swish by hand": lambda g, p, e: g.mul(p, g.sigmoid(p)),
    "max with a row": lambda g, p, e: g.add(g.max(p, e["row"]), e["bias"]),
}


def _product_graph(rng, chain, m=7, k=12, n=9, batched_b=False):
    g = dl.Graph()
    x = g.input("x", (2, m, k))
    w = g.constant(rng.standard_normal((2, k, n) if batched_b else (k, n)).astype(F32))
    g.output("y", chain(g, g.matmul(x, w), _extras(g, rng, m, n)))
    feeds = {"x": rng.standard_normal((2, m, k)).astype(F32), "r": rng.standard_normal((2, m, n)).astype(F32)}
    return g, feeds


@pytest.mark.parametrize("batched_b", [False, True])
@pytest.mark.parametrize("name", sorted(POST))
def test_a_small_product_and_its_chain_run_as_one_onednn_matmul(name, batched_b, rng, fused):
    g, feeds = _product_graph(rng, POST[name], batched_b=batched_b)
    plan = g.compile(["host"])
    try:
        got = poisoned_run(plan, feeds)
        close(got["y"], reference64(g, feeds)["y"], rtol=2e-5)
        assert len(fused) == 1 and [n.op for n in plan.graph.needed()] == ["matmul"]
    finally:
        plan.release()


@pytest.mark.parametrize("name", sorted(NOT_POST))
def test_a_chain_onednn_does_not_express_keeps_numpys_product(name, rng, fused):
    g, feeds = _product_graph(rng, NOT_POST[name])
    plan = g.compile(["host"])
    try:
        close(poisoned_run(plan, feeds)["y"], reference64(g, feeds)["y"], rtol=2e-5)
        assert not fused
    finally:
        plan.release()


def test_nan_and_infinity_go_through_the_post_ops_as_numpy_takes_them(rng, fused):
    """A NaN in A reaches every output of its row through the residual add and tanh, infinities their limits."""
    g, feeds = _product_graph(rng, POST["residual then tanh"])
    feeds["x"][0, 3, 5] = np.nan
    feeds["x"][1, 0, :] = np.inf
    plan = g.compile(["host"])
    try:
        got = poisoned_run(plan, feeds)["y"]
        want = reference64(g, feeds)["y"]
        assert fused
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        finite = np.isfinite(want)
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
        close(got[finite], want[finite], rtol=2e-5)
    finally:
        plan.release()


def test_a_product_too_large_to_run_alone_keeps_its_chain_apart(rng, fused):
    g = dl.Graph()
    x = g.input("x", (256, 256))
    w = g.constant(rng.standard_normal((256, 256)).astype(F32))
    g.output("y", g.relu(g.add(g.matmul(x, w), g.constant(rng.standard_normal(256).astype(F32)))))
    feeds = {"x": rng.standard_normal((256, 256)).astype(F32)}
    plan = g.compile(["host"])
    try:
        close(poisoned_run(plan, feeds)["y"], reference64(g, feeds)["y"])
        assert not fused
    finally:
        plan.release()


def test_post_ops_read_the_running_value_once_and_extra_inputs_besides():
    f32, i64 = np.dtype(F32), np.dtype(np.int64)
    row, scalar = TensorType((4, 5), f32), TensorType((), f32)
    add_row, tanh = ("add", {}, (0, 1)), ("tanh", {}, (2,))
    post, reads = post_ops((add_row, tanh), [row], 3)
    assert [p[0] for p in post] == ["binary", "eltwise"] and post[0][2] == (1, 4, 5) and reads == (0,)
    assert post_ops((("mul", {}, (2, 0)),), [row, scalar], 2)[0][0][2] == (1, 1)  # (a scalar broadcast)
    assert post_ops((("sub", {}, (1, 0)),), [row], 2) is None  # (extra - running)
    assert post_ops((("add", {}, (0, 0)),), [], 2) is None  # (the running value twice)
    assert post_ops((add_row, ("mul", {}, (2, 0))), [row], 2) is None  # (the product again after step 0)
    assert post_ops((("add", {}, (0, 1)),), [TensorType((5,), i64)], 2) is None  # (an integer extra)
    assert post_ops((("floor", {}, (0,)),), [], 2) is None  # (no eltwise for it)
    assert post_ops((("relu", {}, (0,)),), [], 2) is None  # (oneDNN's makes a NaN 0)


@pytest.mark.parametrize("over", ["summand", "a"])
def test_an_eager_output_over_an_operand_is_computed_apart(over, rng, fused):
    """``out=`` the summand (or A, of the output's shape): oneDNN would read it while writing it, NumPy's product
    would overwrite the summand before its step; the call computes apart and copies, and the device stays usable."""
    host = dl.device("host")
    a = rng.standard_normal((3, 4, 4)).astype(F32)
    b = rng.standard_normal((4, 4)).astype(F32)
    r = rng.standard_normal((3, 4, 4)).astype(F32)
    steps = {"epilogue": (("add", {}, (0, 1)), ("tanh", {}, (2,))), "epilogue_inputs": 1}
    want = np.tanh(a.astype(np.float64) @ b + r)
    ta, tb, tr = dl.tensor(a, host), dl.tensor(b, host), dl.tensor(r, host)
    out = tr if over == "summand" else ta
    dl.ops.run("matmul", [ta, tb, tr], out=[out], **steps)
    close(out.numpy(), want, rtol=2e-5)
    assert not fused
    got = dl.ops.run("matmul", [dl.tensor(a, host), tb, dl.tensor(r, host)], **steps)[0].numpy()
    close(got, want, rtol=2e-5)
    assert len(fused) == 1

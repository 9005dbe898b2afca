"""Epilogue fusion (devicelayer/graph/epilogues.py, kernels/ops/epilogue.py): a pointwise chain after matmul or
gemm computed in the product's kernel, on every device, against NumPy float64 and the unfused plan, with launch
counts; the chain left apart where it cannot be an epilogue."""

from __future__ import annotations

import math

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.errors import DeviceLayerError
from devicelayer.kernels.op import TensorType, get
from devicelayer.ops import names  # noqa: F401  (registers the library)

from test_fusion import close, poisoned_run, reference64


def _check(g: dl.Graph, device, feeds: dict, after: int | None = None, before: int | None = None,
           absorbed: int | None = None) -> dl.Graph:
    """Compile ``g`` fused and unfused on ``device``: launches ``after`` and ``before`` fusion, or ``absorbed``
    fewer fused; both plans match float64 (outputs poisoned). Returns the fused graph."""
    fused, plain = g.compile([device]), g.compile([device], fuse=False)
    try:
        if absorbed is None:
            assert plain.kernel_counts()["after"] == before
            assert fused.kernel_counts() == {"before": before, "after": after}
        else:
            assert fused.kernel_counts()["after"] == plain.kernel_counts()["after"] - absorbed
        got, unfused = poisoned_run(fused, feeds), poisoned_run(plain, feeds)
        want = reference64(g, feeds)
        for name in want:
            close(got[name], want[name], 2e-4)
            close(got[name], unfused[name].astype(np.float64), 2e-4)
        return fused.graph
    finally:
        fused.release()
        plain.release()


@pytest.mark.parametrize("seed", range(4))
def test_matmul_bias_activation_is_one_launch(device, seed):
    rng = np.random.default_rng(2000 + seed)
    batch = tuple(int(s) for s in rng.integers(1, 4, size=int(rng.integers(0, 3))))
    m, k, n = (int(s) for s in rng.integers(1, 80, size=3))
    act = ["relu", "gelu", "tanh", "sigmoid"][seed]
    g = dl.Graph()
    x = g.input("x", (*batch, m, k))
    w = g.constant(rng.standard_normal((k, n)).astype(np.float32))
    b = g.constant(rng.standard_normal(n).astype(np.float32))
    z = g.add(g.matmul(x, w), b)
    g.output("y", g.mul(g.apply(act, [z])[0], z))
    feeds = {"x": rng.standard_normal((*batch, m, k)).astype(np.float32)}
    large = _vendor_takes(device, "matmul", [((*batch, m, k)), (k, n)], (*batch, m, n))
    if act == "sigmoid" and _is_host(device):  # z * sigmoid(z) is SiLU: the host runs it as one swish call
        graph = _check(g, device, feeds, 3 if large else 2, 4)
        assert [v.op for v in graph.needed()] == (["matmul", "add", "swish"] if large else ["matmul", "swish"])
        return
    if large:
        # (the host's oneDNN takes a large product: the chain stays one fused kernel after it)
        graph = _check(g, device, feeds, 2, 4)
        assert [n.op for n in graph.needed()] == ["matmul", "fused_elementwise"]
        return
    graph = _check(g, device, feeds, 1, 4)
    [node] = graph.needed()
    assert node.op == "matmul" and [s[0] for s in node.attrs["epilogue"]] == ["add", act, "mul"]


def _is_host(device) -> bool:
    return (device if hasattr(device, "info") else dl.device(device)).info.kernel_language == "python"


def _vendor_takes(device, op: str, shapes, out) -> bool:
    """Whether the device's vendor library takes a float32 product of these shapes."""
    vendor = (device if hasattr(device, "vendor_op") else dl.device(device)).vendor_op(op)
    f32 = np.dtype(np.float32)
    types = [TensorType(tuple(s), f32) for s in shapes]
    return vendor is not None and vendor.accepts(types, [TensorType(tuple(out), f32)], get(op).prepare(types, {})[0])


def test_a_large_host_product_stays_on_the_vendor_library_with_its_chain_after_it(rng):
    """On the host with oneDNN, a product above NUMPY_MNK runs sgemm and its chain one bound fused kernel; a
    small one takes the chain as its epilogue (NumPy's product); both match float64."""
    host = dl.device("host")
    for m, k, n in ((120, 96, 80), (10, 12, 8)):
        g = dl.Graph()
        x = g.input("x", (m, k))
        w = g.constant(rng.standard_normal((k, n)).astype(np.float32))
        g.output("y", g.relu(g.add(g.matmul(x, w), g.constant(rng.standard_normal(n).astype(np.float32)))))
        feeds = {"x": rng.standard_normal((m, k)).astype(np.float32)}
        large = _vendor_takes("host", "matmul", [(m, k), (k, n)], (m, n))
        assert large is (host.vendor_op("matmul") is not None and m * k * n > 262144)
        graph = _check(g, "host", feeds, 2 if large else 1, 3)
        assert [v.op for v in graph.needed()] == (["matmul", "fused_elementwise"] if large else ["matmul"])


def test_gemm_residual_and_lone_relu(device, rng):
    g = dl.Graph()
    a = g.input("a", (20, 33))
    r = g.input("r", (20, 17))
    w = g.constant(rng.standard_normal((17, 33)).astype(np.float32))
    c = g.constant(rng.standard_normal(17).astype(np.float32))
    y = g.gemm(a, w, c, transB=1, alpha=0.5)
    g.output("y", g.relu(g.add(y, r)))
    g.output("y2", g.relu(g.gemm(a, w, transB=1)))  # a lone pointwise node
    feeds = {"a": rng.standard_normal((20, 33)).astype(np.float32),
             "r": rng.standard_normal((20, 17)).astype(np.float32)}
    prefers = getattr(device.vendor_op("gemm"), "prefers_epilogue", False)
    if _vendor_takes(device, "gemm", [(20, 33), (33, 17)], (20, 17)) and not prefers:
        # (a vendor library takes the products: each chain stays one kernel after its product)
        graph = _check(g, device, feeds, 4, 5)
        assert sorted(n.op for n in graph.needed()) == ["fused_elementwise", "gemm", "gemm", "relu"]
        return
    graph = _check(g, device, feeds, 2, 5)
    assert sorted(n.op for n in graph.needed()) == ["gemm", "gemm"]


def test_a_product_read_elsewhere_or_a_shape_that_grows_keeps_its_chain_apart(device, rng):
    g = dl.Graph()
    x = g.input("x", (8, 5))
    w = g.constant(rng.standard_normal((5, 6)).astype(np.float32))
    p = g.matmul(x, w)
    g.output("y", g.tanh(g.relu(p)))
    g.output("p", p)  # the product is an output too
    q = g.matmul(x, w)
    g.output("z", g.relu(g.add(q, g.input("big", (3, 8, 6)))))  # the chain's shape is not the product's
    feeds = {"x": rng.standard_normal((8, 5)).astype(np.float32),
             "big": rng.standard_normal((3, 8, 6)).astype(np.float32)}
    graph = _check(g, device, feeds, 4, 6)
    assert all(not n.attrs.get("epilogue") for n in graph.needed())


def test_the_op_refuses_a_bad_epilogue():
    a, b = TensorType.of((4, 3), np.float32), TensorType.of((3, 5), np.float32)
    op = get("matmul")
    column = {"epilogue": (("add", {}, (0, 1)),), "epilogue_inputs": 1}
    with pytest.raises(DeviceLayerError, match="not a suffix"):
        op.prepare([a, b, TensorType.of((4, 1), np.float32)], column)
    with pytest.raises(DeviceLayerError, match="epilogue"):
        op.prepare([a, b], {"epilogue": (("cast", {"to": np.float16}, (0,)),)})
    with pytest.raises(DeviceLayerError, match="no epilogue"):
        op.prepare([a, b, TensorType.of((5,), np.float32)], {"epilogue_inputs": 1})
    attrs, outs = op.prepare([a, b], {"epilogue": (("relu", {}, (0,)),)})
    assert outs == [TensorType.of((4, 5), np.float32)] and attrs["epilogue_inputs"] == 0
    x = np.arange(12, dtype=np.float32).reshape(4, 3) - 6
    y = np.ones((3, 5), np.float32)
    assert np.array_equal(op.reference([x, y], attrs)[0], np.maximum(x @ y, 0))


def test_a_where_reading_the_product_itself(device, rng):
    """The last step reads the product it overwrites (a causal mask after QK^T): the host applies it from a copy."""
    g = dl.Graph()
    q = g.input("q", (2, 6, 4))
    k = g.input("k", (2, 4, 6))
    mask = g.constant(np.tril(np.ones((6, 6), bool)))
    g.output("s", g.where(mask, g.matmul(q, k), g.constant(np.float32(-np.inf))))
    feeds = {"q": rng.standard_normal((2, 6, 4)).astype(np.float32),
             "k": rng.standard_normal((2, 4, 6)).astype(np.float32)}
    fused = g.compile([device])
    try:
        vendor = _vendor_takes(device, "matmul", [(2, 6, 4), (2, 4, 6)], (2, 6, 6))  # (cuBLAS: the where apart)
        assert fused.kernel_counts() == {"before": 2, "after": 2 if vendor else 1}
        got = poisoned_run(fused, feeds)["s"]
        want = np.where(np.tril(np.ones((6, 6), bool)), feeds["q"].astype(np.float64) @ feeds["k"], -np.inf)
        assert np.array_equal(np.isinf(got), np.isinf(want))
        close(np.where(np.isinf(got), 0, got), np.where(np.isinf(want), 0, want), 2e-4)
    finally:
        fused.release()


class _Library:
    """A stand-in vendor library that takes every call (never run: the test only compiles)."""

    def accepts(self, ins, outs, attrs):
        return True

    def __call__(self, *args):
        raise AssertionError("not run")


def _compiled_with(library, rng, monkeypatch):
    """matmul + bias + relu compiled for PoCL with ``library`` standing in as its vendor matmul."""
    device = dl.device("opencl:0") if any(d.id == "opencl:0" for d in dl.devices()) else None
    if device is None:
        pytest.skip("needs a kernel device")
    monkeypatch.setattr(device, "vendor_op", lambda name: library if name == "matmul" else None)
    g = dl.Graph()
    x = g.input("x", (6, 5))
    w = g.constant(rng.standard_normal((5, 4)).astype(np.float32))
    g.output("y", g.relu(g.add(g.matmul(x, w), g.constant(np.ones(4, np.float32)))))
    return g.compile([device])


def test_a_product_a_vendor_library_takes_keeps_its_chain_as_a_fused_kernel(rng, monkeypatch):
    plan = _compiled_with(_Library(), rng, monkeypatch)
    try:
        ops = [n.op for n in plan.graph.needed()]
        assert ops == ["matmul", "fused_elementwise"]
        assert plan.kernel_counts() == {"before": 3, "after": 2}
    finally:
        plan.release()


def test_epilogue_verdicts_are_kept_per_call_and_tell_calls_apart(device):
    """``epilogue.unsupported`` keeps its verdict per product, extras, steps and device: asked again it gives
    the same answer, and calls that differ only in a step's attribute, an extra's type or the op's buffer count
    get their own."""
    from devicelayer.kernels.ops import epilogue

    f32 = np.dtype(np.float32)
    product = TensorType((4, 5), f32)
    relu = {"epilogue": (("relu", {}, (0,)),)}
    clip = {"epilogue": (("clip", {"min": np.float32(0), "max": np.float32(6)}, (0,)),)}
    added = {"epilogue": (("add", {}, (0, 1)),)}
    epilogue._verdicts.clear()
    first = epilogue.unsupported(product, [], relu, device.info, 3, 64)
    assert epilogue.unsupported(product, [], relu, device.info, 3, 64) == first and len(epilogue._verdicts) == 1
    epilogue.unsupported(product, [], clip, device.info, 3, 64)
    epilogue.unsupported(product, [], {"epilogue": (("clip", {"min": np.float32(1), "max": np.float32(6)}, (0,)),)},
                         device.info, 3, 64)
    assert len(epilogue._verdicts) == 3
    fits = epilogue.unsupported(product, [TensorType((4, 5), f32)], added, device.info, 3, 64)
    full = epilogue.unsupported(product, [TensorType((4, 5), f32)], added, device.info, epilogue.MAX_BUFFERS, 64)
    assert fits is None
    if device.info.kernel_language != "python":
        assert full is not None and "buffers" in full
    assert epilogue._frozen(1) != epilogue._frozen(1.0) != epilogue._frozen(True)
    assert epilogue._frozen(np.array([1, 2], np.int32)) != epilogue._frozen(np.array([1, 2], np.int64))
    with pytest.raises(TypeError):
        epilogue._frozen(object())


class _EpilogueLibrary(_Library):
    """A stand-in vendor library that also applies every epilogue in its own call, and would rather (never run)."""

    takes_epilogue = prefers_epilogue = True


def test_a_vendor_library_that_applies_the_epilogue_takes_the_chain(rng, monkeypatch):
    plan = _compiled_with(_EpilogueLibrary(), rng, monkeypatch)
    try:
        [node] = plan.graph.needed()
        assert node.op == "matmul" and [s[0] for s in node.attrs["epilogue"]] == ["add", "relu"]
        assert plan.kernel_counts() == {"before": 3, "after": 1}
    finally:
        plan.release()


def _projection(g: dl.Graph, x, rng, n: int):
    """GPT-2's Conv1D as exported: the sequence flattened to rows, Gemm with its bias row, the rows reshaped back."""
    b, t, k = x.shape
    w = g.constant(rng.standard_normal((n, k)).astype(np.float32) * 0.3)
    c = g.constant(rng.standard_normal(n).astype(np.float32))
    return g.reshape(g.gemm(g.reshape(x, shape=[-1, k]), w, c, transB=1), shape=[b, t, n])


def test_a_residual_read_through_a_reshape_is_the_products_epilogue(device, rng):
    """gemm -> reshape -> add(residual) -> relu (GPT-2's projection and residual): the chain runs on the product's
    rows, the residual reshaped to them, in the product's launch (cuBLASLt's summand and ReLU on CUDA); the result
    is reshaped after."""
    from devicelayer.graph.epilogues import VIEWS

    g = dl.Graph()
    x = g.input("x", (2, 5, 12))
    residual = g.softmax(g.input("r", (2, 5, 7)), axis=-1)  # (made by a node: its reshape is free)
    g.output("y", g.softmax(g.relu(g.add(_projection(g, x, rng, 7), residual)), axis=-1))
    feeds = {"x": rng.standard_normal((2, 5, 12)).astype(np.float32),
             "r": rng.standard_normal((2, 5, 7)).astype(np.float32)}
    graph = _check(g, device, feeds, absorbed=2)
    ops = [n for n in graph.needed() if n.op not in VIEWS]
    assert sorted(n.op for n in ops) == ["gemm", "softmax", "softmax"]
    [gemm] = [n for n in ops if n.op == "gemm"]
    assert [st[0] for st in gemm.attrs["epilogue"]] == ["add", "relu"]
    assert gemm.outputs[0].shape == (10, 7) and graph.outputs["y"].producer.inputs[0].shape == (2, 5, 7)


@pytest.mark.parametrize("scale", ["row", "leading ones", "scalar"])
def test_a_scale_read_through_a_reshape_takes_the_products_shape(device, scale, rng):
    """gemm -> reshape -> add(residual) -> mul(scale) -> relu: a (1, 1, n) scale becomes (n,) on the product's rows.
    A device whose vendor library takes the product but applies no such scale (cuBLASLt) keeps the chain as one
    fused kernel after it; elsewhere the chain is the product's epilogue."""
    from devicelayer.graph.epilogues import VIEWS

    g = dl.Graph()
    x = g.input("x", (2, 5, 12))
    residual = g.softmax(g.input("r", (2, 5, 7)), axis=-1)
    shapes = {"row": (7,), "leading ones": (1, 1, 7), "scalar": ()}
    s = g.constant((rng.standard_normal(shapes[scale]) + 2).astype(np.float32))
    g.output("y", g.softmax(g.relu(g.mul(g.add(_projection(g, x, rng, 7), residual), s)), axis=-1))
    feeds = {"x": rng.standard_normal((2, 5, 12)).astype(np.float32),
             "r": rng.standard_normal((2, 5, 7)).astype(np.float32)}
    vendor = _vendor_takes(device, "gemm", [(10, 12), (12, 7), (7,)], (10, 7))
    graph = _check(g, device, feeds, absorbed=2 if vendor else 3)
    ops = sorted(n.op for n in graph.needed() if n.op not in VIEWS)
    if vendor:
        assert ops == ["fused_elementwise", "gemm", "softmax", "softmax"]
        return
    assert ops == ["gemm", "softmax", "softmax"]
    [gemm] = [n for n in graph.needed() if n.op == "gemm"]
    assert [st[0] for st in gemm.attrs["epilogue"]] == ["add", "mul", "relu"]
    assert gemm.inputs[-1].shape == (() if scale == "scalar" else (7,))


def test_a_tanh_gelu_read_through_a_reshape_is_the_products_epilogue(device, rng):
    """GPT-2's MLP: gemm -> reshape -> the tanh-GELU chain as exported: on kernel devices GELU is the product's
    epilogue."""
    from devicelayer.graph.epilogues import VIEWS

    g = dl.Graph()
    x = g.input("x", (2, 4, 8))
    h = _projection(g, x, rng, 12)
    cube = g.pow(h, np.float32(3.0))
    inner = g.mul(g.add(h, g.mul(cube, np.float32(0.044715))), np.float32(math.sqrt(2 / math.pi)))
    g.output("y", g.sum(g.mul(g.mul(h, np.float32(0.5)), g.add(g.tanh(inner), np.float32(1.0))), axes=[-1]))
    feeds = {"x": rng.standard_normal((2, 4, 8)).astype(np.float32)}
    fused = g.compile([device])
    try:
        ops = [n for n in fused.graph.needed() if n.op not in VIEWS]
        if _is_host(device):  # (the host runs the pattern's op as one oneDNN call of its own)
            assert [n.op for n in ops] == ["gemm", "gelu_tanh", "sum"] and not ops[0].attrs.get("epilogue")
        else:
            assert [n.op for n in ops] == ["gemm", "sum"]
            assert [st[0] for st in ops[0].attrs["epilogue"]] == ["gelu_tanh"]
        close(poisoned_run(fused, feeds)["y"], reference64(g, feeds)["y"], 2e-4)
    finally:
        fused.release()


@pytest.mark.parametrize("case", ["varies along merged dims", "graph input residual", "chain is an output",
                                  "view read twice"])
def test_a_chain_through_a_reshape_stays_apart_where_it_cannot_move(device, case, rng):
    """Through a view the chain stays apart where an operand varies along the dims the product's rows merge,
    where the reshape an operand needs would copy a graph input each run, where the chain's result is a graph
    output (its reshape would be a copy), or where the view is read outside the chain; values match float64."""
    g = dl.Graph()
    x = g.input("x", (2, 5, 12))
    v = _projection(g, x, rng, 7)
    other = {"varies along merged dims": lambda: g.constant(rng.standard_normal((2, 1, 7)).astype(np.float32)),
             "graph input residual": lambda: g.input("r", (2, 5, 7))}.get(case, lambda: g.constant(np.float32(2)))()
    y = g.relu(g.add(v, other))
    if case == "chain is an output":
        g.output("y", y)
    else:
        g.output("y", g.softmax(y, axis=-1))
    if case == "view read twice":
        g.output("v", g.sum(v, axes=[-1], keepdims=False))
    feeds = {"x": rng.standard_normal((2, 5, 12)).astype(np.float32)}
    if case == "graph input residual":
        feeds["r"] = rng.standard_normal((2, 5, 7)).astype(np.float32)
    fused = g.compile([device])
    try:
        assert all(not n.attrs.get("epilogue") or n.outputs[0].shape == (2, 5, 7) for n in fused.graph.needed()
                   if n.op == "gemm")
        assert not any(n.name.endswith(":out") for n in fused.graph.needed())
        got, want = poisoned_run(fused, feeds), reference64(g, feeds)
        for name in want:
            close(got[name], want[name], 2e-4)
    finally:
        fused.release()


def test_folded_shapes():
    from devicelayer.graph.epilogues import folded_shape

    assert folded_shape((2, 5, 7), (2, 5, 7), (10, 7)) == (10, 7)
    assert folded_shape((7,), (2, 5, 7), (10, 7)) == (7,)
    assert folded_shape((1, 1, 7), (2, 5, 7), (10, 7)) == (7,)
    assert folded_shape((), (2, 5, 7), (10, 7)) == ()
    assert folded_shape((2, 1, 7), (2, 5, 7), (10, 7)) is None
    assert folded_shape((5, 7), (2, 5, 7), (10, 7)) is None
    assert folded_shape((1, 4), (2, 3, 4), (2, 12)) is None  # (no trailing dim shared)
    assert folded_shape((1, 1, 1), (2, 3, 4), (2, 12)) == ()

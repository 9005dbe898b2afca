"""The attention pattern (devicelayer/graph/patterns.py): MatMul(Q, Kᵀ), a scale, an optional constant mask,
Softmax, MatMul(., V) become one attention op on every device, against NumPy float64 and the unfused plan; so does
PyTorch's export of scaled_dot_product_attention (Q and Kᵀ scaled apart, Kᵀ a (0, 2, 3, 1) transpose of the keys'
(B, S, H, D) view, a computed mask, the NaN rows made zeros); refused where the softmax axis, the scale or the mask
differ."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.kernels.op import TensorType, get

from test_fusion import close, poisoned_run, reference64

B, H, SQ, SKV, D = 2, 3, 5, 7, 4


def attention_graph(rng, scale_op="mul", mask=None, perm=(0, 1, 3, 2), axis=-1, scale=None):
    """Q·Kᵀ scaled, optionally masked, softmax, ·V, written out; and random feeds."""
    g = dl.Graph()
    q, k, v = g.input("q", (B, H, SQ, D)), g.input("k", (B, H, SKV, D)), g.input("v", (B, H, SKV, D))
    s = g.matmul(q, g.transpose(k, perm=list(perm)))
    c = np.float32(scale if scale is not None else (1 / np.sqrt(D) if scale_op == "mul" else np.sqrt(D)))
    s = g.mul(s, g.constant(c)) if scale_op == "mul" else g.div(s, g.constant(c))
    if mask is not None:
        s = g.add(s, g.constant(mask))
    g.output("y", g.matmul(g.softmax(s, axis=axis), v))
    feeds = {n: rng.standard_normal((B, H, SKV if n != "q" else SQ, D)).astype(np.float32) for n in "qkv"}
    return g, feeds


def _masks():
    causal = np.triu(np.full((SQ, SKV), -np.inf, np.float32), 1)
    return {"none": None, "causal": causal, "padding": np.where(np.arange(SKV) < 5, 0, -1e9).astype(np.float32)}


@pytest.mark.parametrize("scale_op", ["mul", "div"])
@pytest.mark.parametrize("mask", ["none", "causal", "padding"])
def test_attention_is_recognised(device, rng, scale_op, mask):
    g, feeds = attention_graph(rng, scale_op, _masks()[mask])
    fused, plain = g.compile([device]), g.compile([device], fuse=False)
    try:
        if device.info.kernel_language == "python" and not replaced_on(device, SQ):
            pytest.skip("the host takes attention through oneDNN only, which this machine lacks")
        assert [n.op for n in fused.graph.needed()] == ["attention"]
        assert fused.kernel_counts()["after"] < plain.kernel_counts()["after"]
        got, unfused = poisoned_run(fused, feeds)["y"], poisoned_run(plain, feeds)["y"]
        close(got, reference64(g, feeds)["y"])
        close(got, unfused.astype(np.float64), 1e-4)
    finally:
        fused.release()
        plain.release()


def assert_not_recognised(g, device):
    """``g`` compiled on ``device`` keeps its softmax and gets no attention op."""
    fused = g.compile([device])
    try:
        ops = [n.op for n in fused.graph.needed()]
        assert "attention" not in ops and "softmax" in ops
    finally:
        fused.release()


def replaced_on(device, sq, skv=SKV):
    """Whether the attention op replaces a (B, H, sq, D) x (B, H, skv, D) pattern on ``device``: everywhere but
    where the device's vendor library runs matmul and the op would not run its fused kernel (``VENDOR_PRODUCTS``)."""
    if device.info.kernel_language == "python":  # (oneDNN's route, where the host has it: the reference is slower)
        return device.vendor_op("attention") is not None
    if device.vendor_op("matmul") is None:
        return True
    q, v = TensorType((B, H, sq, D), np.dtype(np.float32)), TensorType((B, H, skv, D), np.dtype(np.float32))
    op = get("attention")
    return op.beats_vendor_products([q, v, v], op.prepare([q, v, v], {})[0], device.info)


def sdpa_graph(rng, masked=True, nan_to_zero=True, scales=(0.7, 0.6), sq=SQ, skv=SKV, merge_heads=False):
    """PyTorch's export of scaled_dot_product_attention over projected (B, S, H*D) activations: Q's heads
    transposed (0, 2, 1, 3) and scaled, Kᵀ the keys' (B, S, H, D) view transposed (0, 2, 3, 1) and scaled, a boolean
    key mask (B, 1, 1, SKV) made -inf/0 by a where, the softmax's NaN rows made zeros; and feeds, with batch 1's
    keys all masked; with ``merge_heads`` the output's heads merged back into (B, S, H*D) as the export does (a
    reshape to its own shape, a (0, 2, 1, 3) transpose, a reshape).  (``sq`` above 16 query rows: the blocked
    kernel on GPUs, the fused one below; ``skv`` of 128 keys or more: a work-group per row of scores.)"""
    g = dl.Graph()
    xq, xk, xv = g.input("xq", (B, sq, H * D)), g.input("xk", (B, skv, H * D)), g.input("xv", (B, skv, H * D))
    keep = g.input("keep", (B, 1, 1, skv), np.bool_)
    heads = lambda x, n: g.reshape(x, shape=[B, n, H, D])  # noqa: E731
    q = g.mul(g.transpose(heads(xq, sq), perm=[0, 2, 1, 3]), g.constant(np.float32(scales[0])))
    kt = g.mul(g.transpose(heads(xk, skv), perm=[0, 2, 3, 1]), g.constant(np.float32(scales[1])))
    v = g.transpose(heads(xv, skv), perm=[0, 2, 1, 3])
    s = g.matmul(q, kt)
    if masked:
        s = g.add(s, g.where(keep, g.constant(np.float32(0)), g.constant(np.float32(-np.inf))))
    p = g.softmax(s, axis=-1)
    if nan_to_zero:
        p = g.where(g.is_nan(p), g.constant(np.float32(0)), p)
    y = g.matmul(p, v)
    if merge_heads:
        y = g.reshape(g.transpose(g.reshape(y, shape=[B, H, sq, D]), perm=[0, 2, 1, 3]), shape=[B, sq, H * D])
    g.output("y", y)
    mask = rng.random((B, 1, 1, skv)) < 0.7
    mask[0, 0, 0, 0] = True
    mask[1] = False  # batch 1: every key masked, its rows zeros
    feeds = {"xq": rng.standard_normal((B, sq, H * D)).astype(np.float32),
             "xk": rng.standard_normal((B, skv, H * D)).astype(np.float32),
             "xv": rng.standard_normal((B, skv, H * D)).astype(np.float32), "keep": mask}
    return g, feeds


@pytest.mark.parametrize("form", ["masked", "masked_long", "masked_long_keys", "unmasked", "kt_plain_transpose"])
def test_exported_sdpa_is_recognised(device, rng, form):
    g, feeds = _sdpa_kt_transpose(rng) if form == "kt_plain_transpose" else \
        sdpa_graph(rng, form != "unmasked", sq=20 if "long" in form else SQ, skv=130 if "keys" in form else SKV)
    fused, plain = g.compile([device]), g.compile([device], fuse=False)
    try:
        ops = [n.op for n in fused.graph.needed()]
        if replaced_on(device, 20 if "long" in form else SQ, 130 if "keys" in form else SKV):
            assert ops.count("attention") == 1 and not {"softmax", "is_nan", "matmul"} & set(ops), ops
            assert fused.kernel_counts()["after"] < plain.kernel_counts()["after"]
        else:
            assert "attention" not in ops and "softmax" in ops
        got, unfused = poisoned_run(fused, feeds)["y"], poisoned_run(plain, feeds)["y"]
        want = reference64(g, feeds)["y"]
        close(got, want)
        close(got, unfused.astype(np.float64), 1e-4)
        if form.startswith("masked"):
            assert np.all(got[1] == 0)  # every key masked: zeros, as the export's where gives them
    finally:
        fused.release()
        plain.release()


def _sdpa_kt_transpose(rng):
    """Q·Kᵀ with Kᵀ = transpose(k, (0, 1, 3, 2)) scaled after the transpose and Q scaled: read through to k."""
    g = dl.Graph()
    q, k, v = g.input("q", (B, H, SQ, D)), g.input("k", (B, H, SKV, D)), g.input("v", (B, H, SKV, D))
    c = g.constant(np.float32(D ** -0.25))
    s = g.matmul(g.mul(c, q), g.mul(g.transpose(k, perm=[0, 1, 3, 2]), c))
    g.output("y", g.matmul(g.softmax(s, axis=-1), v))
    feeds = {n: rng.standard_normal((B, H, SKV if n != "q" else SQ, D)).astype(np.float32) for n in "qkv"}
    return g, feeds


@pytest.mark.parametrize("sq", [SQ, 20])
def test_k_given_transposed_is_recognised(device, rng, sq):
    g = dl.Graph()
    q, kt, v = g.input("q", (B, H, sq, D)), g.input("kt", (B, H, D, SKV)), g.input("v", (B, H, SKV, D))
    g.output("y", g.matmul(g.softmax(g.div(g.matmul(q, kt), g.constant(np.float32(2.0))), axis=-1), v))
    feeds = {"q": rng.standard_normal((B, H, sq, D)).astype(np.float32),
             "kt": rng.standard_normal((B, H, D, SKV)).astype(np.float32),
             "v": rng.standard_normal((B, H, SKV, D)).astype(np.float32)}
    fused = g.compile([device])
    try:
        assert [n.op for n in fused.graph.needed()].count("attention") == int(replaced_on(device, sq))
        close(poisoned_run(fused, feeds)["y"], reference64(g, feeds)["y"])
    finally:
        fused.release()


@pytest.mark.parametrize("mask", ["computed", "computed_long", "computed_long_keys", "constant"])
def test_rows_masked_everywhere_stay_nan_without_the_where(device, rng, mask):
    """Without the where after the softmax a row masked everywhere is the softmax's NaN row: the attention op
    keeps it (``nan_rows``)."""
    if mask.startswith("computed"):
        g, feeds = sdpa_graph(rng, nan_to_zero=False, sq=20 if "long" in mask else SQ,
                              skv=130 if "keys" in mask else SKV)
    else:
        m = np.where(rng.random((SQ, SKV)) < 0.3, -np.inf, 0).astype(np.float32)
        m[2] = -np.inf
        m[:, 0] = np.where(np.arange(SQ) == 2, -np.inf, 0)
        g, feeds = attention_graph(rng, mask=m)
    fused, plain = g.compile([device]), g.compile([device], fuse=False)
    try:
        sq = 20 if "long" in mask else SQ
        assert [n.op for n in fused.graph.needed()].count("attention") == int(
            replaced_on(device, sq, 130 if "keys" in mask else SKV))
        got, unfused = poisoned_run(fused, feeds)["y"], poisoned_run(plain, feeds)["y"]
        close(got, reference64(g, feeds)["y"])
        close(got, unfused.astype(np.float64), 1e-4)
        nan_rows = np.isnan(got)
        assert nan_rows.any() and np.array_equal(nan_rows, np.isnan(unfused))
    finally:
        fused.release()
        plain.release()


@pytest.mark.parametrize("change", ["mask_over_rows_only", "mask_with_nan", "mask_broadcasting_the_scores"])
def test_exported_sdpa_is_not_recognised_when_it_differs(device, rng, change):
    if change == "mask_broadcasting_the_scores":  # the add's output larger than the scores: no attention shape
        g = dl.Graph()
        q, k, v = g.input("q", (1, H, SQ, D)), g.input("k", (1, H, SKV, D)), g.input("v", (1, H, SKV, D))
        s = g.add(g.matmul(q, g.transpose(k, perm=[0, 1, 3, 2])), g.input("m", (B, H, SQ, SKV)))
        g.output("y", g.matmul(g.softmax(s, axis=-1), v))
    else:
        g = dl.Graph()
        q, k, v = g.input("q", (B, H, SQ, D)), g.input("k", (B, H, SKV, D)), g.input("v", (B, H, SKV, D))
        m = np.zeros((SQ, 1), np.float32) if change == "mask_over_rows_only" else np.zeros((SQ, SKV), np.float32)
        m[0, 0] = np.nan if change == "mask_with_nan" else -3.0
        s = g.add(g.mul(g.matmul(q, g.transpose(k, perm=[0, 1, 3, 2])), g.constant(np.float32(0.5))),
                  g.constant(m))
        p = g.softmax(s, axis=-1)
        g.output("y", g.matmul(g.where(g.is_nan(p), g.constant(np.float32(0)), p), v))
    assert_not_recognised(g, device)


@pytest.mark.parametrize("change", ["axis", "scale_tensor", "cast_before_softmax"])
def test_attention_is_not_recognised_when_it_differs(device, rng, change):
    if change == "cast_before_softmax":  # a one-input node where the scale or mask would be
        g = dl.Graph()
        q, k, v = g.input("q", (B, H, SQ, D)), g.input("k", (B, H, SKV, D)), g.input("v", (B, H, SKV, D))
        s = g.mul(g.matmul(q, g.transpose(k, perm=[0, 1, 3, 2])), g.constant(np.float32(0.5)))
        g.output("y", g.matmul(g.softmax(g.cast(s, to=np.float32), axis=-1), v))
    elif change == "axis":
        g, _ = attention_graph(rng, axis=2)
    else:
        g = dl.Graph()
        q, k, v = g.input("q", (B, H, SQ, D)), g.input("k", (B, H, SKV, D)), g.input("v", (B, H, SKV, D))
        s = g.mul(g.matmul(q, g.transpose(k, perm=[0, 1, 3, 2])), g.constant(np.full((SKV,), 0.5, np.float32)))
        g.output("y", g.matmul(g.softmax(s, axis=-1), v))
    assert_not_recognised(g, device)


def _attention_nodes(plan):
    return [n for n in plan.graph.needed() if n.op == "attention"]


@pytest.mark.parametrize("sq", [SQ, 20])
def test_the_heads_transposes_around_exported_attention_are_taken_in(device, rng, sq):
    """PyTorch's export splits (B, S, H*D) projections into heads with (0, 2, 1, 3) transposes (Kᵀ with (0, 2, 3,
    1)) and merges the output's heads back: the attention op reads and writes (B, S, H, D) itself, no transpose
    is left, and the result matches float64 and the unfused plan."""
    g, feeds = sdpa_graph(rng, sq=sq, merge_heads=True)
    fused, plain = g.compile([device]), g.compile([device], fuse=False)
    try:
        ops = [n.op for n in fused.graph.needed()]
        if replaced_on(device, sq):
            (node,) = _attention_nodes(fused)
            assert tuple(node.attrs["sequence_major"]) == (1, 1, 1, 1) and not node.attrs["k_transposed"]
            assert "transpose" not in ops, ops
        got, unfused = poisoned_run(fused, feeds)["y"], poisoned_run(plain, feeds)["y"]
        close(got, reference64(g, feeds)["y"])
        close(got, unfused.astype(np.float64), 1e-4)
        assert np.all(got[1] == 0)
    finally:
        fused.release()
        plain.release()


@pytest.mark.parametrize("shared", ["v_heads_also_an_output", "q_heads_read_as_v"])
def test_a_heads_transpose_read_elsewhere_stays(device, rng, shared):
    """A transpose whose output something outside the pattern reads stays a node (the op reads its output as
    (B, H, S, D)); one that feeds both q and v is taken in once, for both."""
    g = dl.Graph()
    xq, xv = g.input("xq", (B, SKV, H * D)), g.input("xv", (B, SKV, H * D))
    heads = lambda x: g.transpose(g.reshape(x, shape=[B, SKV, H, D]), perm=[0, 2, 1, 3])  # noqa: E731
    q, v = heads(xq), heads(xv)
    if shared == "q_heads_read_as_v":
        v = q
    else:
        g.output("vt", v)
    kt = g.transpose(g.reshape(xv, shape=[B, SKV, H, D]), perm=[0, 2, 3, 1])
    g.output("y", g.matmul(g.softmax(g.mul(g.matmul(q, kt), g.constant(np.float32(0.5))), axis=-1), v))
    feeds = {n: rng.standard_normal((B, SKV, H * D)).astype(np.float32) for n in ("xq", "xv")}
    fused = g.compile([device])
    try:
        nodes = _attention_nodes(fused)
        if replaced_on(device, SKV):
            (node,) = nodes
            want = (1, 1, 0, 0) if shared == "v_heads_also_an_output" else (1, 1, 1, 0)
            assert tuple(node.attrs["sequence_major"]) == want
        got = poisoned_run(fused, feeds)
        want64 = reference64(g, feeds)
        for name in got:
            close(got[name], want64[name])
    finally:
        fused.release()


def fused_projection_graph(rng, hq=4, hk=4, s=24, d=8, escape=False):
    """GPT-2's attention as exported: one (B, S, (Hq + 2·Hk)·D) projection split into q, k and v along its last
    axis, each reshaped to (B, S, H, D) and transposed to heads (k to kᵀ), a causal mask added, softmax, ·V, the
    heads merged back; and feeds. With ``escape`` the v piece is a graph output too."""
    g = dl.Graph()
    width = (hq + 2 * hk) * d
    x = g.input("x", (B, s, width))
    q, k, v = g.apply("split", [x], axis=2, split=[hq * d, hk * d, hk * d])
    if escape:
        g.output("v_piece", v)
    heads = lambda t, h: g.reshape(t, shape=[B, s, h, d])  # noqa: E731
    qh = g.transpose(heads(q, hq), perm=[0, 2, 1, 3])
    kt = g.transpose(heads(k, hk), perm=[0, 2, 3, 1])
    vh = g.transpose(heads(v, hk), perm=[0, 2, 1, 3])
    if hq != hk:  # (grouped heads: the export repeats the key heads; here the test keeps one per query head)
        raise ValueError("the pattern graph has as many key heads as query heads")
    scores = g.mul(g.matmul(qh, kt), g.constant(np.float32(1 / np.sqrt(d))))
    scores = g.add(scores, g.constant(np.triu(np.full((s, s), -np.inf, np.float32), 1)))
    y = g.matmul(g.softmax(scores, axis=-1), vh)
    g.output("y", g.reshape(g.transpose(y, perm=[0, 2, 1, 3]), shape=[B, s, hq * d]))
    return g, {"x": rng.standard_normal((B, s, width)).astype(np.float32)}


@pytest.mark.parametrize("form", ["tiled", "blocked", "composed", None])
def test_a_fused_projections_split_is_read_where_it_lies(device, rng, form):
    """The split cutting q, k and v from one projection, and their reshapes, join the attention op as
    ``packed_heads`` where the device reads them in place (the op's kernels other than the composition, or its
    vendor library): no split left; elsewhere the split stays. Values match float64 either way."""
    from devicelayer.kernels.ops import attention as attention_op

    g, feeds = fused_projection_graph(rng)
    with attention_op.forcing(form) if form else contextlib.nullcontext():
        fused = g.compile([device])
    try:
        ops = [n.op for n in fused.graph.needed()]
        if "attention" in ops:
            [node] = [n for n in fused.graph.needed() if n.op == "attention"]
            packed = node.attrs.get("packed_heads", (0, 0)) != (0, 0)
            assert packed == ("split" not in ops)
            host = device.info.kernel_language == "python"
            if not host and form in ("tiled", "blocked") and _takes(device, form, node):
                assert packed, ops
            if not host and form == "composed" and device.vendor_op("attention") is None:
                assert not packed, ops
        else:
            assert not replaced_on(device, 24, 24) and "split" in ops
        close(poisoned_run(fused, feeds)["y"], reference64(g, feeds)["y"])
    finally:
        fused.release()


def _takes(device, form, node) -> bool:
    """Whether ``form`` is the form the device runs the attention node's inputs with."""
    op = get("attention")
    ins = [v.type for v in node.inputs]
    attrs, _ = op.prepare(ins, dict(node.attrs))
    from devicelayer.kernels.ops import attention as attention_op

    with attention_op.forcing(form):
        return op.form(op.heads_major(ins, attrs), device.info, -1) == form


def test_a_split_whose_piece_is_read_elsewhere_stays(device, rng):
    from devicelayer.kernels.ops import attention as attention_op

    g, feeds = fused_projection_graph(rng, escape=True)
    with attention_op.forcing("tiled"):
        fused = g.compile([device])
    try:
        ops = [n.op for n in fused.graph.needed()]
        assert "split" in ops
        assert all(n.attrs.get("packed_heads", (0, 0)) == (0, 0) for n in fused.graph.needed() if n.op == "attention")
        got, want = poisoned_run(fused, feeds), reference64(g, feeds)
        for name in want:
            close(got[name], want[name])
    finally:
        fused.release()

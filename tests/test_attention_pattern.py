"""The attention pattern (devicelayer/graph/patterns.py): MatMul(Q, Kᵀ), a scale, an optional constant mask,
Softmax, MatMul(., V) become one attention op on every device, against NumPy float64 and the unfused plan; refused
where the transpose, the softmax axis, the scale or the mask differ."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl

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
        assert [n.op for n in fused.graph.needed()] == ["attention"]
        assert fused.kernel_counts()["after"] < plain.kernel_counts()["after"]
        got, unfused = poisoned_run(fused, feeds)["y"], poisoned_run(plain, feeds)["y"]
        close(got, reference64(g, feeds)["y"])
        close(got, unfused.astype(np.float64), 1e-4)
    finally:
        fused.release()
        plain.release()


@pytest.mark.parametrize("change", ["no_transpose", "axis", "scale_tensor", "all_masked_row", "cast_before_softmax"])
def test_attention_is_not_recognised_when_it_differs(device, rng, change):
    if change == "no_transpose":  # K given transposed: no transpose node to read K through
        g2 = dl.Graph()
        q, k, v = g2.input("q", (B, H, SQ, D)), g2.input("k", (B, H, D, SKV)), g2.input("v", (B, H, SKV, D))
        s = g2.mul(g2.matmul(q, k), g2.constant(np.float32(0.5)))  # K given transposed: no transpose node
        g2.output("y", g2.matmul(g2.softmax(s, axis=-1), v))
        g = g2
    elif change == "cast_before_softmax":  # a one-input node where the scale or mask would be
        g = dl.Graph()
        q, k, v = g.input("q", (B, H, SQ, D)), g.input("k", (B, H, SKV, D)), g.input("v", (B, H, SKV, D))
        s = g.mul(g.matmul(q, g.transpose(k, perm=[0, 1, 3, 2])), g.constant(np.float32(0.5)))
        g.output("y", g.matmul(g.softmax(g.cast(s, to=np.float32), axis=-1), v))
    elif change == "axis":
        g, _ = attention_graph(rng, axis=2)
    elif change == "scale_tensor":
        g = dl.Graph()
        q, k, v = g.input("q", (B, H, SQ, D)), g.input("k", (B, H, SKV, D)), g.input("v", (B, H, SKV, D))
        s = g.mul(g.matmul(q, g.transpose(k, perm=[0, 1, 3, 2])), g.constant(np.full((SKV,), 0.5, np.float32)))
        g.output("y", g.matmul(g.softmax(s, axis=-1), v))
    else:
        m = np.zeros((SQ, SKV), np.float32)
        m[2] = -np.inf
        g, _ = attention_graph(rng, mask=m)
    fused = g.compile([device])
    try:
        assert "attention" not in [n.op for n in fused.graph.needed()]
        assert "softmax" in [n.op for n in fused.graph.needed()]
    finally:
        fused.release()

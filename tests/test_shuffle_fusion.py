"""A reshape-transpose-reshape channel shuffle becomes one channel_shuffle node, and only where it is one."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.graph.shuffle import fuse_channel_shuffles


def _shuffled(shape, group, perm=None, split=None, reader=False, mid_output=False):
    g = dl.Graph()
    x = g.input("x", shape)
    n, c, *rest = shape
    y = g.relu(x)
    a = g.reshape(y, shape=list(split or (n, group, c // group, *rest)))
    if mid_output:
        g.output("mid", a)
    t = g.transpose(a, perm=list(perm or (0, 2, 1, *range(3, len(shape) + 1))))
    if reader:
        g.output("t", g.neg(t))
    g.output("y", g.sigmoid(g.reshape(t, shape=list(shape))))
    return g


def _ops(g):
    return [n.op for n in g.order()]


def _same(g, fused, shape, rng):
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    want, got = g.compile(["host"])(**feeds), fused.compile(["host"])(**feeds)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


@pytest.mark.parametrize("shape,group", [((1, 12, 5, 5), 3), ((2, 12, 4), 4), ((1, 6, 2, 3, 2), 2)])
def test_a_channel_shuffle_becomes_one_node(shape, group, rng):
    g = _shuffled(shape, group)
    fused = fuse_channel_shuffles(g)
    assert _ops(fused) == ["relu", "channel_shuffle", "sigmoid"]
    assert next(n for n in fused.order() if n.op == "channel_shuffle").attrs["group"] == group
    _same(g, fused, shape, rng)


@pytest.mark.parametrize("kind", ["perm", "split", "reader", "mid_output"])
def test_what_is_not_exactly_a_channel_shuffle_stays(kind, rng):
    shape = (1, 12, 4, 4)
    g = _shuffled(shape, 3, perm=(0, 1, 2, 4, 3) if kind == "perm" else None,
                  split=(1, 3, 4, 2, 8) if kind == "split" else None, reader=kind == "reader",
                  mid_output=kind == "mid_output")
    fused = fuse_channel_shuffles(g)
    assert fused is g and "channel_shuffle" not in _ops(fused)


def test_shufflenet_loads_with_channel_shuffles_and_matches_the_model_as_written(rng):
    import onnx

    from devicelayer.onnx import load
    from devicelayer.onnx.testing import light_path, random_inputs, randomize_weights

    model = randomize_weights(onnx.load(str(light_path("shufflenet"))), seed=5, expose_logits=True)
    fused, literal = load(model).graph(), load(model, fold=False).graph()
    ops = _ops(fused)
    assert ops.count("channel_shuffle") == 16 and "transpose" not in ops
    assert _ops(literal).count("transpose") == 16
    feeds = random_inputs(model, seed=2)
    want, got = literal.compile(["host"])(**feeds), fused.compile(["host"])(**feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5 * np.abs(want[name]).max())

"""A plan's channels-last layout carried through steps no vendor op runs (devicelayer/graph/layout.py): pointwise
ops whose other operands broadcast along axes the layout keeps in order run on the bytes' own shapes, and
transposes between (N, C, spatial...) and (N, spatial..., C) become aliases. Every plan against the float64
reference; on the host's oneDNN convolutions, whose layout is channels-last."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.backends.host import dnnl as host_dnnl
from devicelayer.graph.layout import bytes_agree, last_shape
from devicelayer.kernels.op import Alias
from devicelayer.kernels.runner import vendor_of
from op_cases import graph_reference64

pytestmark = pytest.mark.skipif(host_dnnl.library() is None, reason="oneDNN is not installed")

C, H, W = 32, 12, 10


def _filters(rng, m, c, k):
    return (rng.standard_normal((m, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)


def _check(g, feeds, rtol=1e-4):
    """The plan's outputs against the float64 reference; returns the plan's node steps by name (the plan is
    released by the caller)."""
    ref = graph_reference64(g, feeds)
    for fuse in (False, True):
        plan = g.compile(["host"], fuse=fuse)
        try:
            got = plan(**feeds)
            for name, want in ref.items():
                np.testing.assert_allclose(got[name], want, rtol=rtol, atol=rtol, err_msg=f"{name} (fuse={fuse})")
            steps = {s.node.name: s for s in plan._prepared.steps if s.kind == "node"}
        finally:
            plan.release()
        if not fuse:
            unfused = steps
    return unfused


def test_which_operands_read_alike_in_both_layouts():
    assert bytes_agree((2, 32, 1, 1), 4) and bytes_agree((32, 1, 1), 4) and bytes_agree((2, 1, 5, 7), 4)
    assert bytes_agree((1, 1, 7), 4) and bytes_agree((3, 1), 3)
    assert not bytes_agree((32, 5, 1), 4) and not bytes_agree((2, 32, 5, 7), 4) and not bytes_agree((3, 4), 3)
    assert last_shape((32, 1, 1), 4) == (1, 1, 1, 32) and last_shape((2, 1, 5, 7), 4) == (2, 5, 7, 1)


OPERANDS = {
    "max by a per-image channel gate": ("max", lambda g, rng, x: g.max(x, g.input("s", (2, C, 1, 1))),
                                        {"s": (2, C, 1, 1)}),
    "where by a per-position mask": ("where", lambda g, rng, x: g.where(
        g.greater(g.input("m", (2, 1, H, W)), g.constant(np.float32(0))), x, g.constant(np.float32(-0.5))),
        {"m": (2, 1, H, W)}),
    "prelu by a per-channel slope": ("prelu", lambda g, rng, x: g.prelu(
        x, g.constant(rng.uniform(0.1, 0.3, (C, 1, 1)).astype(np.float32))), {}),
    "mul by a per-position scale": ("mul", lambda g, rng, x: g.mul(g.input("p", (1, 1, H, W)), x),
                                    {"p": (1, 1, H, W)}),
}


def _feeds(rng, shapes):
    out = {"x": rng.standard_normal((2, C, H, W)).astype(np.float32)}
    for name, shape in shapes.items():
        out[name] = rng.standard_normal(shape).astype(np.float32)
    return out


@pytest.mark.parametrize("case", list(OPERANDS))
def test_a_pointwise_op_with_a_broadcast_operand_runs_between_convolutions_channels_last(case, rng):
    op, build, shapes = OPERANDS[case]
    g = dl.Graph()
    x = g.conv(g.input("x", (2, C, H, W)), g.constant(_filters(rng, C, C, 3)), pads=[1, 1, 1, 1], name="first")
    y = build(g, rng, x)
    y.producer.name = "middle"
    g.output("y", g.conv(y, g.constant(_filters(rng, C, C, 3)), pads=[1, 1, 1, 1], name="next"))
    steps = _check(g, _feeds(rng, shapes))
    middle = steps["middle"]
    assert middle.types is not None and middle.types[1][0].shape == (2, H, W, C), case
    assert vendor_of(steps["first"].op_plan)._binding.out_last
    assert vendor_of(steps["next"].op_plan)._binding.in_last == {0}


def test_an_operand_varying_along_channels_and_space_keeps_the_graphs_layout(rng):
    g = dl.Graph()
    x = g.conv(g.input("x", (2, C, H, W)), g.constant(_filters(rng, C, C, 3)), pads=[1, 1, 1, 1], name="first")
    y = g.max(x, g.input("s", (1, C, H, 1)))
    y.producer.name = "middle"
    g.output("y", g.conv(y, g.constant(_filters(rng, C, C, 3)), pads=[1, 1, 1, 1], name="next"))
    steps = _check(g, _feeds(rng, {"s": (1, C, H, 1)}))
    assert steps["middle"].types is None
    assert not vendor_of(steps["first"].op_plan)._binding.out_last


def test_a_gate_of_squeeze_and_excitation_keeps_the_block_channels_last(rng):
    """conv, global pool, two 1x1 convolutions, sigmoid, the gate's product with the activations, conv: the
    product runs on (N, H, W, C) against the gate as (N, 1, 1, C)."""
    g = dl.Graph()
    x = g.conv(g.input("x", (2, C, H, W)), g.constant(_filters(rng, C, C, 3)), pads=[1, 1, 1, 1], name="first")
    s = g.global_average_pool(x)
    s = g.relu(g.conv(s, g.constant(_filters(rng, 8, C, 1))))
    gate = g.sigmoid(g.conv(s, g.constant(_filters(rng, C, 8, 1))))
    y = g.pow(x, gate)  # (a pointwise op the host runs without oneDNN)
    y.producer.name = "middle"
    g.output("y", g.conv(g.abs(y), g.constant(_filters(rng, C, C, 3)), pads=[1, 1, 1, 1], name="next"))
    feeds = _feeds(rng, {})
    feeds["x"] = np.abs(feeds["x"])
    steps = _check(g, feeds)
    assert steps["middle"].types is not None and steps["middle"].types[0][1].shape == (2, 1, 1, C)
    assert vendor_of(steps["first"].op_plan)._binding.out_last


def _transposed_block(g, rng, rank, out_of_to_last=False):
    """conv, to channels-last order, layer norm, back, conv (1-D or 2-D)."""
    shape = (2, C, H) if rank == 3 else (2, C, H, W)
    k = (3,) if rank == 3 else (3, 3)
    pads = [1] * (2 * len(k))
    w1 = (rng.standard_normal((C, C, *k)) / np.sqrt(C * 9)).astype(np.float32)
    w2 = (rng.standard_normal((C, C, *k)) / np.sqrt(C * 9)).astype(np.float32)
    x = g.conv(g.input("x", shape), g.constant(w1), pads=pads, name="first")
    t = g.transpose(x, perm=[0, *range(2, rank), 1], name="to_last")
    if out_of_to_last:
        g.output("t", t)
    n = g.layer_normalization(t, g.constant(rng.uniform(0.5, 1.5, C).astype(np.float32)),
                              g.constant(rng.standard_normal(C).astype(np.float32)), axis=-1, name="norm")
    back = g.transpose(n, perm=[0, rank - 1, *range(1, rank - 1)], name="to_first")
    g.output("y", g.conv(back, g.constant(w2), pads=pads, name="next"))
    return {"x": rng.standard_normal(shape).astype(np.float32)}


@pytest.mark.parametrize("rank", [3, 4])
def test_transposes_to_and_from_channels_last_order_become_aliases(rank, rng):
    g = dl.Graph()
    feeds = _transposed_block(g, rng, rank)
    steps = _check(g, feeds)
    for name in ("to_last", "to_first"):
        assert steps[name].op_plan.steps == [Alias(0, 0)], name
    assert vendor_of(steps["first"].op_plan)._binding.out_last
    assert vendor_of(steps["next"].op_plan)._binding.in_last == {0}


def test_a_transpose_whose_output_the_caller_reads_is_copied(rng):
    g = dl.Graph()
    feeds = _transposed_block(g, rng, 4, out_of_to_last=True)
    steps = _check(g, feeds)
    assert steps["to_last"].op_plan.steps == [Alias(0, 0)] and steps["to_last"].copies == [(0, 0)]


def test_a_transpose_of_a_convolutions_output_from_channels_last_order_moves_its_bytes(rng):
    """perm (0, 3, 1, 2) of a convolution's (N, C, H, W) output: the layout's order is no help to it (an alias
    only where its input is in the graph's layout and its output held), so it transposes what the convolution
    wrote in the graph's layout."""
    g = dl.Graph()
    x = g.conv(g.input("x", (2, C, H, C)), g.constant(_filters(rng, C, C, 3)), pads=[1, 1, 1, 1], name="first")
    t = g.transpose(x, perm=[0, 3, 1, 2], name="odd")
    g.output("y", g.conv(t, g.constant(_filters(rng, C, C, 3)), pads=[1, 1, 1, 1], name="next"))
    steps = _check(g, {"x": rng.standard_normal((2, C, H, C)).astype(np.float32)})
    assert steps["odd"].op_plan.steps != [Alias(0, 0)]
    assert not vendor_of(steps["first"].op_plan)._binding.out_last

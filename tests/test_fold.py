"""Folding per-channel affine maps (batch normalization, mul, add by constants) into the conv before them, and
ReLUs into convs."""

from __future__ import annotations

import numpy as np

import devicelayer as dl
from devicelayer.graph.fold import fold_affine, fuse_activations


def _net(rng, middle_output: bool = False, constant_weights: bool = True):
    g = dl.Graph()
    x = g.input("x", (2, 3, 6, 5))
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    wv = g.constant(w) if constant_weights else g.input("w", w.shape)
    y = g.conv(x, wv, g.constant(rng.standard_normal(4).astype(np.float32)), pads=[1, 1, 1, 1])
    c = [rng.uniform(0.5, 1.5, 4).astype(np.float32) for _ in range(4)]
    y = g.batch_normalization(y, *[g.constant(v) for v in c], epsilon=1e-3)
    if middle_output:
        g.output("mid", y)
    y = g.mul(y, g.constant(rng.uniform(0.5, 2, (4, 1, 1)).astype(np.float32)))
    y = g.add(g.constant(rng.standard_normal((1, 4, 1, 1)).astype(np.float32)), y)
    g.output("y", g.relu(y))
    return g, ({"w": w} if not constant_weights else {})


def _run(g, feeds):
    plan = g.compile(["host"])
    try:
        return plan(**feeds)
    finally:
        plan.release()


def _same_outputs(g, folded, rng, extra):
    feeds = {"x": rng.standard_normal((2, 3, 6, 5)).astype(np.float32), **extra}
    want, got = _run(g, feeds), _run(folded, feeds)
    assert list(got) == list(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)


def test_conv_batchnorm_mul_add_fold_into_the_conv(rng):
    g, extra = _net(rng)
    folded = fold_affine(g)
    assert [n.op for n in folded.needed()] == ["conv", "relu"]
    _same_outputs(g, folded, rng, extra)


def test_folding_stops_at_an_output(rng):
    g, extra = _net(rng, middle_output=True)  # the batch normalization folds: its output is "mid"
    folded = fold_affine(g)
    assert [n.op for n in folded.needed()] == ["conv", "mul", "add", "relu"]
    _same_outputs(g, folded, rng, extra)


def test_a_conv_with_input_weights_keeps_its_batchnorm_which_takes_the_rest(rng):
    g, extra = _net(rng, constant_weights=False)
    folded = fold_affine(g)
    assert [n.op for n in folded.needed()] == ["conv", "batch_normalization", "relu"]
    _same_outputs(g, folded, rng, extra)


def test_a_graph_with_nothing_to_fold_is_returned_as_is():
    g = dl.Graph()
    x = g.input("x", (1, 2, 3, 3))
    g.output("y", g.mul(g.relu(x), g.constant(np.full((2, 1, 1), 2, np.float32))))
    assert fold_affine(g) is g


def test_onnx_load_folds_and_can_keep_the_graph_as_written():
    from devicelayer.onnx import load, bundled

    folded, literal = load(bundled()).graph(), load(bundled(), fold=False).graph()
    assert len(folded.needed()) <= len(literal.needed())


def test_a_relu_reading_only_a_conv_becomes_its_activation_after_the_folds(rng):
    g, extra = _net(rng)
    fused = fuse_activations(fold_affine(g))
    assert [(n.op, n.attrs.get("activation")) for n in fused.needed()] == [("conv", "relu")]
    _same_outputs(g, fused, rng, extra)


def test_a_relu_is_not_fused_where_the_conv_output_is_read_elsewhere(rng):
    g = dl.Graph()
    x = g.input("x", (2, 3, 6, 5))
    y = g.conv(x, g.constant(rng.standard_normal((4, 3, 3, 3)).astype(np.float32)), pads=[1, 1, 1, 1])
    g.output("y", g.add(g.relu(y), y))  # the conv output has a second reader
    z = g.conv(x, g.constant(rng.standard_normal((4, 3, 1, 1)).astype(np.float32)))
    g.output("z", z)  # a graph output
    g.output("r", g.relu(z))
    assert fuse_activations(g) is g


def test_an_affine_map_after_a_fused_relu_stays_a_node(rng):
    g = dl.Graph()
    x = g.input("x", (2, 3, 6, 5))
    y = g.conv(x, g.constant(rng.standard_normal((4, 3, 3, 3)).astype(np.float32)), activation="relu")
    g.output("y", g.mul(y, g.constant(np.full((4, 1, 1), -2, np.float32))))  # relu(v) * -2 != relu(v * -2)
    assert fold_affine(g) is g
    _same_outputs(g, fuse_activations(fold_affine(g)), rng, {})


def test_onnx_load_fuses_conv_relu(rng):
    from devicelayer.onnx import load, bundled

    ops = [(n.op, n.attrs.get("activation")) for n in load(bundled()).graph().needed()]
    literal = [n.op for n in load(bundled(), fold=False).graph().needed()]
    assert literal.count("relu") > 0 and ("conv", "relu") in ops
    assert sum(op == "relu" for op, _ in ops) < literal.count("relu")


def _block(rng, shortcut_conv: bool, bias: bool = True):
    """A residual block: relu(conv(relu(conv(x))) + shortcut), the shortcut a 1x1 conv or x itself."""
    g = dl.Graph()
    x = g.input("x", (2, 3, 6, 5))

    def conv(v, cin, cout, k, with_bias=True):
        w = g.constant((rng.standard_normal((cout, cin, k, k)) * 0.3).astype(np.float32))
        b = [g.constant(rng.standard_normal(cout).astype(np.float32))] if with_bias else []
        return g.conv(v, w, *b, pads=[k // 2] * 4)

    h = g.relu(conv(x, 3, 3, 3))
    main = conv(h, 3, 4 if shortcut_conv else 3, 3, bias)
    short = conv(x, 3, 4, 1) if shortcut_conv else x
    g.output("y", g.relu(g.add(main, short)))
    return g


def test_a_residual_add_and_relu_move_into_the_conv(rng):
    for shortcut_conv in (False, True):
        for bias in (False, True):
            g = _block(rng, shortcut_conv, bias)
            fused = fuse_activations(g)
            shapes = [(n.op, len(n.inputs), n.attrs.get("activation")) for n in fused.order()]
            assert [op for op, _, _ in shapes] == ["conv"] * (3 if shortcut_conv else 2)
            assert ("conv", 4, "relu") in shapes and not any(n.op in ("add", "relu") for n in fused.order())
            _same_outputs(g, fused, rng, {})


def test_an_add_that_broadcasts_or_has_other_readers_stays(rng):
    g = dl.Graph()
    x = g.input("x", (2, 3, 6, 5))
    y = g.conv(x, g.constant(rng.standard_normal((3, 3, 3, 3)).astype(np.float32)), pads=[1, 1, 1, 1])
    g.output("a", g.add(y, g.constant(np.ones((1, 3, 1, 1), np.float32))))  # broadcasts: not a summand
    y2 = g.conv(x, g.constant(rng.standard_normal((3, 3, 1, 1)).astype(np.float32)))
    s = g.add(y2, x)
    g.output("s", s)  # the sum is an output: Z fuses, nothing after it
    g.output("r", g.relu(g.mul(s, s)))
    fused = fuse_activations(g)
    ops = [(n.op, len(n.inputs)) for n in fused.order()]
    assert ("add", 2) in ops and ("conv", 4) in ops and ("relu", 1) in ops
    _same_outputs(g, fused, rng, {})


def _bn_params(g, rng, c):
    return [g.constant(rng.uniform(0.5, 1.5, c).astype(np.float32)) for _ in range(4)]


def test_a_relu_reading_only_a_batch_normalization_becomes_its_activation(rng):
    g = dl.Graph()
    x = g.input("x", (2, 3, 6, 5))
    h = g.relu(g.batch_normalization(x, *_bn_params(g, rng, 3)))  # pre-activation, as DenseNet's
    y = g.conv(h, g.constant(rng.standard_normal((4, 3, 1, 1)).astype(np.float32)))
    g.output("y", y)
    fused = fuse_activations(g)
    assert [(n.op, n.attrs.get("activation")) for n in fused.order()] == [("batch_normalization", "relu"),
                                                                          ("conv", None)]
    _same_outputs(g, fused, rng, {})


def test_a_batch_normalization_read_elsewhere_keeps_its_relu(rng):
    g = dl.Graph()
    x = g.input("x", (2, 3, 6, 5))
    n1 = g.batch_normalization(x, *_bn_params(g, rng, 3))
    g.output("a", g.add(g.relu(n1), n1))  # a second reader
    n2 = g.batch_normalization(x, *_bn_params(g, rng, 3))
    g.output("n2", n2)  # a graph output
    g.output("r", g.relu(n2))
    assert fuse_activations(g) is g


def test_a_batch_normalization_with_a_relu_is_not_folded_into_the_conv_before_it(rng):
    g = dl.Graph()
    x = g.input("x", (2, 3, 6, 5))
    y = g.conv(x, g.constant(rng.standard_normal((3, 3, 3, 3)).astype(np.float32)), pads=[1, 1, 1, 1])
    g.output("y", g.batch_normalization(y, *_bn_params(g, rng, 3), activation="relu"))
    assert fold_affine(g) is g
    _same_outputs(g, fuse_activations(fold_affine(g)), rng, {})

"""Large float32 chains of elementwise steps on the host as one oneDNN primitive with post-ops (backends/host/
fused.py): every form it takes against the float64 reference, NaN and infinities as NumPy gives them, outputs over
an input, and the chains it leaves to NumPy's form."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.backends.host import dnnl as host_dnnl
from devicelayer.kernels.op import TensorType, get
from devicelayer.ops import names  # noqa: F401  (registers the op library)

pytestmark = pytest.mark.skipif(host_dnnl.library() is None, reason="oneDNN is not installed")


def _steps(*steps):
    return tuple((op, attrs, tuple(operands)) for op, attrs, operands in steps)


def _checked(arrays, steps, outputs):
    types = [TensorType(a.shape, a.dtype) for a in arrays]
    attrs, outs = get("fused_elementwise").prepare(types, {"steps": steps, "outputs": outputs})
    return types, attrs, outs


def _reference(arrays, steps, outputs):
    _, attrs, _ = _checked(arrays, steps, outputs)
    wide = [a.astype(np.float64) if a.dtype == np.float32 else a for a in arrays]
    with np.errstate(all="ignore"):
        return get("fused_elementwise").reference(wide, attrs)


def _routed(arrays, steps, outputs):
    types, attrs, outs = _checked(arrays, steps, outputs)
    return dl.device("host").vendor_op("fused_elementwise").route(types, outs, attrs) is not None


def _run(arrays, steps, outputs, out_dtype=np.float32):
    host = dl.device("host")
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    ins = [dl.tensor(a, host) for a in arrays]
    poison = np.nan if np.dtype(out_dtype).kind == "f" else -12345
    outs = [dl.tensor(np.full(shape, poison, out_dtype), host) for _ in outputs]  # poisoned
    dl.ops.run("fused_elementwise", ins, out=outs, steps=steps, outputs=outputs)
    return [o.numpy() for o in outs]


def _close(got, want, what=""):
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=what)
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want), err_msg=what)
    finite = np.isfinite(want)
    scale = max(1.0, float(np.max(np.abs(want[finite]), initial=0)))
    np.testing.assert_allclose(got[finite].astype(np.float64), want[finite], rtol=2e-5, atol=2e-6 * scale,
                               err_msg=what)


def _f32(rng, *shape, shift=0.0):
    return (rng.standard_normal(shape) + shift).astype(np.float32)


# (id, input shapes, steps, shift of the inputs, the output dtype): every one a chain oneDNN takes
CHAINS = [
    ("layer_scale_residual", [(96, 1, 1), (1, 96, 24, 24), (1, 96, 24, 24)],
     _steps(("mul", {}, (0, 1)), ("add", {}, (3, 2))), 0.0),
    ("bias_then_scale", [(1, 200, 192), (192,), ()],
     _steps(("add", {}, (0, 1)), ("mul", {}, (3, 2))), 0.0),
    ("sub_div_tanh", [(3, 120, 100), (1, 120, 1), (120, 1)],
     _steps(("sub", {}, (0, 1)), ("div", {}, (3, 2)), ("tanh", {}, (4,))), 3.0),
    ("unary_first_then_binary", [(2, 64, 18, 18), (1, 64, 1, 1), (2, 64, 18, 18)],
     _steps(("elu", {"alpha": 0.7}, (0,)), ("mul", {}, (3, 1)), ("hard_swish", {}, (4,)), ("sub", {}, (5, 2))), 0.0),
    ("x_times_sigmoid_x", [(4, 50, 200)], _steps(("sigmoid", {}, (0,)), ("mul", {}, (0, 1))), 0.0),
    ("running_value_second", [(40000,), (40000,)],
     _steps(("add", {}, (1, 0)), ("swish", {"alpha": 1.5}, (2,)), ("mul", {}, (1, 3)), ("leaky_relu", {"alpha": 0.1}, (4,))),
     0.0),
]


@pytest.mark.parametrize("shapes,steps,shift", [c[1:] for c in CHAINS], ids=[c[0] for c in CHAINS])
def test_chains_oneDNN_takes_match_the_float64_reference(shapes, steps, shift, rng):
    arrays = [_f32(rng, *s, shift=shift) for s in shapes]
    outputs = (len(steps) - 1,)
    assert _routed(arrays, steps, outputs)
    got, = _run(arrays, steps, outputs)
    _close(got, _reference(arrays, steps, outputs)[0])


def test_a_last_cast_runs_after_the_primitive(rng):
    """sigmoid to float64 (YOLOv8's scores) and a scaled sum to int32 (the cast op's own rounding and range)."""
    x = _f32(rng, 1, 80, 600)
    steps = _steps(("sigmoid", {}, (0,)), ("cast", {"to": np.dtype(np.float64)}, (1,)))
    assert _routed([x], steps, (1,))
    got, = _run([x], steps, (1,), np.float64)
    assert got.dtype == np.float64
    _close(got, _reference([x], steps, (1,))[0])

    a, s = _f32(rng, 300, 200) * 50, np.array(3.0, np.float32)
    steps = _steps(("mul", {}, (0, 1)), ("cast", {"to": np.dtype(np.int32)}, (2,)))
    assert _routed([a, s], steps, (1,))
    got, = _run([a, s], steps, (1,), np.int32)
    cast, _ = get("cast").prepare([TensorType(a.shape, a.dtype)], {"to": np.dtype(np.int32)})
    np.testing.assert_array_equal(got, get("cast").reference([a * s], cast)[0])


def test_nans_and_infinities_come_out_as_numpy_gives_them(rng):
    x, b = _f32(rng, 2, 100, 300), _f32(rng, 300)
    x.flat[:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30]
    b[:3] = [0.0, np.inf, np.nan]
    steps = _steps(("div", {}, (0, 1)), ("sigmoid", {}, (2,)), ("add", {}, (3, 0)), ("tanh", {}, (4,)))
    assert _routed([x, b], steps, (3,))
    got, = _run([x, b], steps, (3,))
    _close(got, _reference([x, b], steps, (3,))[0])


@pytest.mark.parametrize("over", [0, 1])
def test_an_output_over_an_input_is_still_right(over, rng):
    """Written over the first source (oneDNN computes in place there) or over a post-op's tensor (computed
    apart)."""
    host = dl.device("host")
    arrays = [_f32(rng, 1, 64, 30, 30), _f32(rng, 1, 64, 30, 30)]
    steps = _steps(("mul", {}, (0, 1)), ("sigmoid", {}, (2,)), ("add", {}, (3, 1 - over)))
    want = _reference(arrays, steps, (2,))[0]
    ins = [dl.tensor(a, host) for a in arrays]
    dl.ops.run("fused_elementwise", ins, out=[ins[over]], steps=steps, outputs=(2,))
    _close(ins[over].numpy(), want)


def test_chains_it_does_not_take_run_numpys_form(rng):
    """An intermediate output, a step reading an earlier step than the one before or the one before twice, sub
    with the full operand second, float16, a tensor small enough for the calling thread, a post-op operand oneDNN
    broadcasts only in its reference form: the NumPy form, right."""
    x, c = _f32(rng, 3, 100, 150), _f32(rng, 150)
    cases = [
        ([x, c], _steps(("add", {}, (0, 1)), ("tanh", {}, (2,))), (0, 1)),
        ([x, c], _steps(("add", {}, (0, 1)), ("tanh", {}, (2,)), ("mul", {}, (3, 2))), (2,)),
        ([x, c], _steps(("add", {}, (0, 1)), ("mul", {}, (2, 2))), (1,)),
        ([c, x], _steps(("sub", {}, (0, 1)), ("exp", {}, (2,))), (1,)),
        ([x.astype(np.float16), c.astype(np.float16)], _steps(("add", {}, (0, 1)), ("tanh", {}, (2,))), (1,)),
        ([x[:1, :10], c], _steps(("add", {}, (0, 1)), ("tanh", {}, (2,))), (1,)),
        # a row operand after the first step: oneDNN has only its reference form for that broadcast
        ([x, c, c], _steps(("add", {}, (0, 1)), ("mul", {}, (3, 2))), (1,)),
    ]
    for arrays, steps, outputs in cases:
        assert not _routed(arrays, steps, outputs), steps
        dtype = arrays[0].dtype
        got = _run(arrays, steps, outputs, dtype)
        for g, w in zip(got, _reference(arrays, steps, outputs)):
            if dtype == np.float16:
                np.testing.assert_allclose(g.astype(np.float64), w, rtol=2e-3, atol=2e-3)
            else:
                _close(g, w)


def test_a_model_s_layer_scale_and_residual_run_as_one_onednn_call(rng):
    """ConvNeXt's block tail as a graph: fused into one node, that node on oneDNN, the result the reference's."""
    g = dl.Graph()
    x, r = g.input("x", (1, 96, 28, 28)), g.input("r", (1, 96, 28, 28))
    scale = _f32(rng, 96, 1, 1)
    g.output("y", g.add(g.mul(g.constant(scale), x), r))
    plan = g.compile(["host"])
    try:
        assert [n.op for n in plan.graph.needed()] == ["fused_elementwise"]
        xv, rv = _f32(rng, 1, 96, 28, 28), _f32(rng, 1, 96, 28, 28)
        _close(plan(x=xv, r=rv)["y"], scale.astype(np.float64) * xv + rv)
        assert any(k[0] == "fused_elementwise" and k[1][0] == (1, 96, 28, 28) for k in dl.device("host").onednn_layers)
    finally:
        plan.release()

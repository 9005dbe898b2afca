"""CUDA's warp-per-row layer and RMS normalization (backends/cuda/layernorm.py): row lengths that give one lane to
32 lanes a row and every vector width, statistics outputs, buffers too little aligned for vectors, calls it leaves
to the op's kernels; every result against float64 with the outputs poisoned."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.kernels.op import TensorType, get
from devicelayer.tensors import Tensor

CUDA = [d for d in dl.devices() if d.info.backend == "cuda"]
pytestmark = pytest.mark.skipif(not CUDA, reason="no CUDA device")
TOL = {"float16": 4e-3, "bfloat16": 1.6e-2, "float32": 2e-5}


def _reference(x, scale, bias, axis, eps, center=True):
    axes = tuple(range(axis, x.ndim))
    w = x.astype(np.float64)
    mean = w.mean(axis=axes, keepdims=True) if center else np.zeros_like(w.sum(axis=axes, keepdims=True))
    inv = 1 / np.sqrt(((w - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    y = (w - mean) * inv
    if scale is not None:
        y = y * scale.astype(np.float64)
    if bias is not None:
        y = y + bias.astype(np.float64)
    return y, mean, inv


def _vendor(name, ins, attrs):
    """The device's vendor op and whether it takes the call."""
    dev = CUDA[0]
    types = [TensorType(a.shape, a.dtype) for a in ins]
    checked, outs = get(name).prepare(types, dict(attrs))
    op = dev.vendor_op(name)
    return op is not None and op.accepts(types, outs, checked)


def _poisoned(shape, dtype):
    return dl.tensor(np.full(shape, np.nan, dtype), CUDA[0])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("shape,axis", [((3, 5, 96), -1), ((7, 768), 1), ((2, 3, 4096), 2), ((33, 1), 1),
                                        ((4, 3, 10), 1), ((5, 100), -1), ((6, 12, 7), -1), ((2, 0, 16), -1)])
@pytest.mark.parametrize("params", ["none", "scale", "scale-bias"])
def test_layer_normalization_against_float64(rng, dtype, shape, axis, params):
    x = rng.standard_normal(shape).astype(dtype) * 3 + 1
    k = shape[axis:]
    scale = rng.standard_normal(k).astype(dtype) if params != "none" else None
    bias = rng.standard_normal(k).astype(dtype) if params == "scale-bias" else None
    ins = [a for a in (x, scale, bias) if a is not None]
    attrs = {"axis": axis, "epsilon": 1e-5}
    assert _vendor("layer_normalization", ins, attrs)
    dev = CUDA[0]
    out = _poisoned(shape, dtype)
    [y] = dl.ops.run("layer_normalization", [dl.tensor(a, dev) for a in ins], out=out, **attrs)
    want, _, _ = _reference(x, scale, bias, axis % len(shape), 1e-5)
    np.testing.assert_allclose(y.numpy().astype(np.float64), want, rtol=TOL[dtype], atol=TOL[dtype] * 4)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_rms_normalization_and_statistics(rng, dtype):
    dev = CUDA[0]
    x = rng.standard_normal((9, 384)).astype(dtype)
    scale = rng.standard_normal(384).astype(dtype)
    assert _vendor("rms_normalization", [x, scale], {"axis": -1})
    [y] = dl.ops.run("rms_normalization", [dl.tensor(x, dev), dl.tensor(scale, dev)], out=_poisoned(x.shape, dtype),
                 axis=-1, epsilon=1e-6)
    want, _, _ = _reference(x, scale, None, 1, 1e-6, center=False)
    np.testing.assert_allclose(y.numpy().astype(np.float64), want, rtol=TOL[dtype], atol=TOL[dtype] * 4)
    bias = rng.standard_normal(384).astype(dtype)
    outs = [_poisoned(x.shape, dtype), _poisoned((9, 1), np.float32), _poisoned((9, 1), np.float32)]
    y, mean, inv = dl.ops.run("layer_normalization", [dl.tensor(a, dev) for a in (x, scale, bias)], out=outs, axis=-1,
                          epsilon=1e-5, stats=True)
    want, want_mean, want_inv = _reference(x, scale, bias, 1, 1e-5)
    np.testing.assert_allclose(y.numpy().astype(np.float64), want, rtol=TOL[dtype], atol=TOL[dtype] * 4)
    np.testing.assert_allclose(mean.numpy(), want_mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(inv.numpy(), want_inv, rtol=1e-4)


def test_buffers_too_little_aligned_for_vectors_take_one_element_at_a_time(rng):
    dev = CUDA[0]
    x = rng.standard_normal((5, 96)).astype(np.float16)
    held = dl.tensor(np.concatenate([np.zeros(1, np.float16), x.reshape(-1)]), dev)
    shifted = Tensor(held.buffer.view(2, x.nbytes, x.dtype), x.shape, x.dtype, held.ready)
    out = dl.tensor(np.full(x.size + 1, np.nan, np.float16), dev)
    y = Tensor(out.buffer.view(2, x.nbytes, x.dtype), x.shape, x.dtype, out.ready)
    dl.ops.run("layer_normalization", [shifted], out=y, axis=-1, epsilon=1e-5)[0].ready.wait()
    want, _, _ = _reference(x, None, None, 1, 1e-5)
    np.testing.assert_allclose(out.numpy()[1:].reshape(x.shape).astype(np.float64), want, rtol=4e-3, atol=1e-2)


def test_calls_the_kernel_leaves_to_the_op_kernels_still_run(rng):
    dev = CUDA[0]
    x = rng.standard_normal((4, 8, 6)).astype(np.float32)
    cases = [
        ([x, rng.standard_normal((8, 1)).astype(np.float32)], {"axis": 1}),  # scale broadcast within the row
        ([x, rng.standard_normal((4, 1, 6)).astype(np.float32)], {"axis": 2}),  # differing between rows
        ([rng.standard_normal((2, 5000)).astype(np.float32)], {"axis": -1}),  # a row too long
        ([x.astype(np.float64)], {"axis": -1}),
    ]
    for ins, attrs in cases:
        assert not _vendor("layer_normalization", ins, attrs), attrs
        [y] = dl.ops.run("layer_normalization", [dl.tensor(a, dev) for a in ins], epsilon=1e-5, **attrs)
        axis = attrs["axis"] % ins[0].ndim
        want, _, _ = _reference(ins[0], ins[1] if len(ins) > 1 else None, None, axis, 1e-5)
        np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)


def test_a_plan_runs_its_layer_normalization_through_the_kernel(rng):
    from devicelayer.kernels.runner import vendor_of
    from op_cases import graph_reference64

    g = dl.Graph()
    x = g.input("x", (2, 7, 7, 96), np.float16)
    n = g.layer_normalization(x, g.constant(rng.uniform(0.5, 1.5, 96).astype(np.float16)),
                              g.constant(rng.standard_normal(96).astype(np.float16)), axis=-1, name="norm")
    g.output("y", g.gelu(n))
    plan = g.compile([CUDA[0]])
    try:
        feeds = {"x": rng.standard_normal((2, 7, 7, 96)).astype(np.float16)}
        got, want = plan(**feeds)["y"], graph_reference64(g, feeds)["y"]
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-2, atol=1e-2)
        [step] = [s for s in plan._prepared.steps if s.kind == "node" and s.node.name == "norm"]
        assert type(vendor_of(step.op_plan)).__name__ == "RowNorm"
    finally:
        plan.release()

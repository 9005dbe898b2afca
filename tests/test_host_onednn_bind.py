"""oneDNN layers bound to fixed operands (``Layer.bind``): a bound call runs the same steps as ``run`` with memories
of its own, so calls bound to other operands of one layer, and plain runs in between, do not disturb it."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from devicelayer.backends.host import dnnl as host_dnnl, dnnl_layers as host_dnnl_layers
from devicelayer.kernels.op import TensorType, get
from devicelayer.ops import names  # noqa: F401  (registers the op library)

pytestmark = pytest.mark.skipif(host_dnnl.library() is None, reason="oneDNN is not installed")


def _reference(op, arrays, **attrs):
    checked, _ = get(op).prepare([TensorType(a.shape, a.dtype) for a in arrays], dict(attrs))
    return get(op).reference([a.astype(np.float64) for a in arrays], checked)[0]


def _nhwc(a):
    return np.ascontiguousarray(np.moveaxis(a, 1, -1))


def _poisoned(shape):
    return np.full(shape, np.nan, np.float32)


@pytest.mark.parametrize("x_last,y_last", [(False, False), (True, True), (False, True), (True, False)])
@pytest.mark.parametrize("summand", ["none", "apart", "in place", "other layout"])
@pytest.mark.parametrize("prepared", [True, False])
def test_bound_convolutions_match_the_reference_interleaved_with_other_operands(x_last, y_last, summand, prepared,
                                                                                rng):
    """Two bound calls of one layer on two sets of operands, and a plain run on a third, interleaved: every step
    (weight, input, summand and output reorders, the summand copied into Y) runs on the call's own operands."""
    xs, ws, ys = (2, 5, 7, 6), (8, 5, 3, 3), (2, 8, 7, 6)
    has_z = summand != "none"
    layer = host_dnnl.ConvLayer(xs, ws, ys, [1, 1, 1, 1], [1, 1], [1, 1], 1, True, has_z)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    wp = layer.prepare_weights(w) if prepared else w
    z_last = y_last if summand == "in place" else (not y_last if summand == "other layout" else y_last)

    def operands():
        x = rng.standard_normal(xs).astype(np.float32)
        z = rng.standard_normal(ys).astype(np.float32)
        want = _reference("conv", [x, w, b], pads=[1, 1, 1, 1]) + (z if has_z else 0)
        y = _poisoned(ys)
        y_mem = _nhwc(y) if y_last else y
        x_mem = _nhwc(x) if x_last else x
        z_mem = (_nhwc(z) if z_last else z) if has_z else None
        if summand == "in place":
            y_mem[...] = z_mem
            z_mem = y_mem
        ptrs = (x_mem.ctypes.data, wp.ctypes.data, b.ctypes.data, y_mem.ctypes.data,
                z_mem.ctypes.data if has_z else 0, prepared, x_last, z_last, y_last)
        return ptrs, (x_mem, z_mem, y_mem), want

    def result(kept):
        y_mem = kept[2]
        return np.moveaxis(y_mem, -1, 1) if y_last else y_mem

    first, kept1, want1 = operands()
    second, kept2, want2 = operands()
    third, kept3, want3 = operands()
    call1 = layer.bind(*first, keep=kept1)
    call2 = layer.bind(*second, keep=kept2)
    for run in range(1 if summand == "in place" else 2):  # (in place, a second run would add Z to its result)
        for kept in (kept1, kept2, kept3):
            if run:
                kept[2][...] = np.nan
        call1()
        layer.run(*third)
        call2()
        np.testing.assert_allclose(result(kept1), want1, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(result(kept2), want2, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(result(kept3), want3, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("x_last,y_last", [(False, False), (True, False), (True, True), (False, True)])
def test_bound_pools_write_either_layout_on_their_own_operands(x_last, y_last, rng):
    """A pool reading one layout and writing the other runs its output reorder through the layer's scratch; two
    bound calls and a run in between each get their own result."""
    xs, ys = (1, 6, 9, 8), (1, 6, 4, 4)
    layer = host_dnnl_layers.PoolLayer(xs, ys, host_dnnl_layers.POOL_MAX, (3, 2), (2, 2), (1, 1), (0, 0),
                                       (0, 0), x_last, y_last)
    cases = []
    for _ in range(3):
        x = rng.standard_normal(xs).astype(np.float32)
        y = _poisoned(ys)
        x_mem, y_mem = (_nhwc(x) if x_last else x), (_nhwc(y) if y_last else y)
        want = _reference("max_pool", [x], kernel_shape=[3, 2], strides=[2, 2])
        cases.append(((x_mem.ctypes.data, y_mem.ctypes.data), (x_mem, y_mem), want))
    calls = [layer.bind(*ptrs, keep=kept) for ptrs, kept, _ in cases[:2]]
    calls[0]()
    layer.run(*cases[2][0])
    calls[1]()
    for _, (x_mem, y_mem), want in cases:
        got = np.moveaxis(y_mem, -1, 1) if y_last else y_mem
        np.testing.assert_array_equal(got, want.astype(np.float32))


def test_bound_concat_and_layer_norm_take_lists_of_operands(rng):
    a, b = rng.standard_normal((1, 3, 4)).astype(np.float32), rng.standard_normal((1, 5, 4)).astype(np.float32)
    y = _poisoned((1, 8, 4))
    concat = host_dnnl_layers.ConcatLayer([a.shape, b.shape], y.shape, 1, [False, False], False)
    concat.bind([a.ctypes.data, b.ctypes.data], y.ctypes.data, keep=(a, b, y))()
    np.testing.assert_array_equal(y, np.concatenate([a, b], axis=1))
    x = rng.standard_normal((6, 16)).astype(np.float32)
    scale, shift = rng.standard_normal(16).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    out = _poisoned(x.shape)
    norm = host_dnnl_layers.LayerNormLayer(x.shape, 1e-5, True, True)
    norm.bind(x.ctypes.data, [scale.ctypes.data, shift.ctypes.data], out.ctypes.data)()
    want = _reference("layer_normalization", [x, scale, shift], axis=-1, epsilon=1e-5)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_a_dropped_bound_call_releases_its_memories_and_keeps_the_layer_alive(rng, monkeypatch):
    """The memories a bound call made are destroyed with it; the call holds the layer, so dropping the layer
    first leaves the call working."""
    made, released = set(), []
    real_init, real_release = host_dnnl._Memory.__init__, host_dnnl._Memory.release

    def recording(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        made.add(id(self))

    def counting(self):
        if self.handle and id(self) in made:  # (only this test's memories: earlier tests' are freed when they are)
            released.append(self)
        real_release(self)
    monkeypatch.setattr(host_dnnl._Memory, "__init__", recording)
    monkeypatch.setattr(host_dnnl._Memory, "release", counting)
    x = rng.standard_normal(64).astype(np.float32)
    y = _poisoned(64)
    layer = host_dnnl_layers.EltwiseLayer(64, host_dnnl.ELTWISE_RELU, 0.0, 0.0)
    call = layer.bind(x.ctypes.data, y.ctypes.data, keep=(x, y))
    del layer
    gc.collect()
    assert not released
    call()
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    del call
    gc.collect()
    assert len(released) >= 4  # (the call's two memories, then the layer's own two)

"""The CUDA channels-last depthwise kernel (backends/cuda/depthwise_conv.py): every (V, TW) choice on windows,
strides, dilations and pads of real networks, with bias, summand and ReLU, against float64 with the output
poisoned; addresses its vector width is not aligned for; a plan whose depthwise layers take the kernel between
channels-last neighbours (with constant filters and with filters fed each run), a squeeze-and-excitation gate and
ConvNeXt's transposes; the stored choice read back."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.kernels.op import TensorType
from op_cases import graph_reference64

CUDA = [d for d in dl.devices() if d.info.backend == "cuda"]
pytestmark = pytest.mark.skipif(not CUDA, reason="no CUDA device")
TOL = {"float16": 1e-2, "bfloat16": 4e-2, "float32": 1e-5}


def _module(name):
    return importlib.import_module(f"{type(CUDA[0]).__module__.rpartition('.')[0]}.{name}")


def _reference(x, w, b, z, strides, pads, dilations, relu):
    """Depthwise convolution in float64 (NCHW)."""
    n, c, ih, iw = x.shape
    kh, kw = w.shape[2:]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (ih + pads[0] + pads[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (iw + pads[1] + pads[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    y = np.zeros((n, c, oh, ow))
    for i in range(kh):
        for j in range(kw):
            win = xp[:, :, i * dilations[0]:i * dilations[0] + strides[0] * (oh - 1) + 1:strides[0],
                     j * dilations[1]:j * dilations[1] + strides[1] * (ow - 1) + 1:strides[1]]
            y += win * w[:, 0, i, j].astype(np.float64)[None, :, None, None]
    if b is not None:
        y += b.astype(np.float64)[None, :, None, None]
    if z is not None:
        y += z.astype(np.float64)
    return np.maximum(y, 0) if relu else y


GEOMETRIES = [  # (C, H, W, k, strides, pads, dilations)
    (96, 14, 13, 7, (1, 1), (3, 3, 3, 3), (1, 1)),  # ConvNeXt
    (32, 17, 16, 3, (2, 2), (1, 1, 1, 1), (1, 1)),  # MobileNet, strided
    (40, 9, 11, 5, (1, 2), (2, 2, 2, 2), (1, 1)),  # EfficientNet's 5x5, one axis strided
    (12, 10, 12, 3, (1, 1), (2, 2, 2, 2), (2, 2)),  # dilated
    (7, 8, 9, 3, (1, 1), (0, 1, 2, 0), (1, 1)),  # odd channels, asymmetric pads
]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=[str(g[:4]) for g in GEOMETRIES])
@pytest.mark.parametrize("epilogue", ["none", "bias-relu", "bias-summand-relu"])
def test_every_choice_against_float64(rng, dtype, geometry, epilogue):
    import cupy

    dw = _module("depthwise_conv")
    c, h, w_, k, strides, pads, dilations = geometry
    x = rng.standard_normal((2, c, h, w_)).astype(dtype)
    w = (rng.standard_normal((c, 1, k, k)) / k).astype(dtype)
    b = rng.standard_normal(c).astype(dtype) if epilogue != "none" else None
    attrs = {"strides": list(strides), "pads": list(pads), "dilations": list(dilations), "group": c,
             "activation": "relu" if "relu" in epilogue else None}
    want = _reference(x, w, b, None, strides, pads, dilations, False)
    z = rng.standard_normal(want.shape).astype(dtype) if "summand" in epilogue else None
    want = _reference(x, w, b, z, strides, pads, dilations, "relu" in epilogue)
    ins = [TensorType(x.shape, x.dtype), TensorType(w.shape, w.dtype)] + (
        [TensorType(b.shape, b.dtype)] if b is not None else []) + ([TensorType(z.shape, z.dtype)] if z is not None
                                                                   else [])
    outs = [TensorType(want.shape, np.dtype(dtype))]
    assert dw.takes(ins, outs, attrs)
    choices = dw.choices(ins, outs, attrs)
    assert choices and (c % 2 or any(v > 1 for v, _ in choices))
    with CUDA[0]._enter("test"):
        xl = cupy.asarray(np.ascontiguousarray(np.moveaxis(x, 1, -1)))
        taps = cupy.asarray(dw.relaid(w))
        bd = cupy.asarray(b) if b is not None else None
        zl = cupy.asarray(np.ascontiguousarray(np.moveaxis(z, 1, -1))) if z is not None else None
        stream = cupy.cuda.Stream(non_blocking=True)
        for choice in choices:
            y = cupy.full((want.shape[0], *want.shape[2:], c), np.nan, dtype)
            dw.run(stream, ins, outs, attrs, choice, xl.data.ptr, taps.data.ptr,
                   bd.data.ptr if bd is not None else 0, y.data.ptr, zl.data.ptr if zl is not None else 0)
            stream.synchronize()
            got = np.moveaxis(cupy.asnumpy(y), -1, 1).astype(np.float64)
            scale = max(1.0, float(np.abs(want).max()))
            np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype] * scale, err_msg=str(choice))


def test_addresses_its_vector_width_does_not_fit_take_one_channel_a_thread(rng):
    import cupy

    dw = _module("depthwise_conv")
    c = 16
    x = rng.standard_normal((1, c, 6, 6)).astype(np.float16)
    w = (rng.standard_normal((c, 1, 3, 3)) / 3).astype(np.float16)
    attrs = {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1], "group": c, "activation": None}
    ins, outs = [TensorType(x.shape, x.dtype), TensorType(w.shape, w.dtype)], [TensorType(x.shape, x.dtype)]
    want = _reference(x, w, None, None, (1, 1), (1, 1, 1, 1), (1, 1), False)
    with CUDA[0]._enter("test"):
        held = cupy.zeros(x.size + 1, np.float16)  # one element in: 2-byte aligned only
        held[1:] = cupy.asarray(np.moveaxis(x, 1, -1).reshape(-1))
        taps = cupy.asarray(dw.relaid(w))
        y = cupy.full(x.size + 1, np.nan, np.float16)
        stream = cupy.cuda.Stream(non_blocking=True)
        dw.run(stream, ins, outs, attrs, (4, 4), held.data.ptr + 2, taps.data.ptr, 0, y.data.ptr + 2, 0)
        stream.synchronize()
        got = np.moveaxis(cupy.asnumpy(y[1:]).reshape(1, 6, 6, c), -1, 1).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)


def test_a_call_the_kernel_does_not_take_is_refused():
    dw = _module("depthwise_conv")
    t = np.dtype(np.float16)
    attrs = {"strides": [1, 1], "pads": [0] * 4, "dilations": [1, 1], "group": 8, "activation": None}
    x, y = TensorType((1, 8, 5, 5), t), TensorType((1, 8, 5, 5), t)
    assert not dw.takes([x, TensorType((16, 1, 1, 1), t)], [TensorType((1, 16, 5, 5), t)], attrs)  # multiplier 2
    assert not dw.takes([x, TensorType((8, 1, 1, 1), t)], [y], {**attrs, "group": 4})  # grouped, not depthwise
    assert not dw.takes([x, TensorType((8, 1, 1, 1), t)], [y], {**attrs, "activation": "sigmoid"})
    assert not dw.takes([TensorType((1, 8, 5, 5), np.dtype(np.float64)), TensorType((8, 1, 1, 1), np.dtype(
        np.float64))], [TensorType((1, 8, 5, 5), np.dtype(np.float64))], attrs)
    assert not dw.takes([x, TensorType((8, 1, 1, 31), t)], [TensorType((1, 8, 5, 1), t)],
                        {**attrs, "pads": [0, 13, 0, 13]})  # a window wider than the kernel holds


def _weights(g, rng, m, cin, k, dtype):
    return g.constant((rng.standard_normal((m, cin, k, k)) / np.sqrt(cin * k * k)).astype(dtype))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("fed", [False, True])
def test_a_plan_runs_depthwise_layers_channels_last_through_the_kernel(rng, tmp_path, monkeypatch, dtype, fed):
    """1x1 expansion, depthwise 5x5 (its filters a constant or a graph input), SiLU, a squeeze-and-excitation
    gate, 1x1 projection plus the input; then ConvNeXt's depthwise 7x7, to (N, H, W, C), LayerNorm, back: the
    depthwise layers take the kernel, everything between the convolutions stays channels-last, results match
    float64 (arena poisoned before)."""
    monkeypatch.setenv("DEVICELAYER_CACHE", str(tmp_path))
    cuda_conv, cuda_dnn = _module("conv"), _module("dnn")
    if cuda_dnn.library() is None:
        pytest.skip("cuDNN is not installed")
    dw = _module("depthwise_conv")
    monkeypatch.setattr(cuda_conv, "routes_best", lambda dev, key: float("inf"))
    tune = dw.tune
    monkeypatch.setattr(dw, "tune", lambda *a: (lambda found: found and (found[0], 0.0))(tune(*a)))
    dev = CUDA[0]
    dev._conv_routes.clear()
    c, e, s = 16 + 2 * fed + (dtype == "float32") * 4 + (dtype == "bfloat16") * 8, 48, 13  # (geometries of their own)
    g = dl.Graph()
    x = g.input("x", (2, c, s, s), dtype)
    a = g.conv(x, _weights(g, rng, e, c, 1, dtype), activation="relu", name="expand")
    w5 = g.input("w5", (e, 1, 5, 5), dtype) if fed else _weights(g, rng, e, 1, 5, dtype)
    d = g.conv(a, w5, g.constant(rng.standard_normal(e).astype(dtype)), pads=[2] * 4, group=e, name="dw5")
    d = g.mul(d, g.sigmoid(d))
    gate = g.sigmoid(g.conv(g.relu(g.conv(g.global_average_pool(d), _weights(g, rng, 8, e, 1, dtype))),
                            _weights(g, rng, e, 8, 1, dtype)))
    p = g.conv(g.mul(d, gate), _weights(g, rng, c, e, 1, dtype), g.constant(np.zeros(c, dtype)), x,
               name="project")
    d7 = g.conv(p, _weights(g, rng, c, 1, 7, dtype), pads=[3] * 4, group=c, name="dw7")
    t = g.transpose(d7, perm=[0, 2, 3, 1])
    n = g.layer_normalization(t, g.constant(np.ones(c, dtype)), g.constant(np.zeros(c, dtype)), axis=-1)
    back = g.transpose(n, perm=[0, 3, 1, 2])
    g.output("y", g.conv(g.add(back, p), _weights(g, rng, c, c, 1, dtype), name="last"))
    plan = g.compile([dev])
    try:
        feeds = {"x": rng.standard_normal((2, c, s, s)).astype(dtype)}
        if fed:
            feeds["w5"] = (rng.standard_normal((e, 1, 5, 5)) / 5).astype(dtype)
        plan(**{k: np.full_like(v, np.nan) for k, v in feeds.items()})
        got, want = plan(**feeds)["y"], graph_reference64(g, feeds)["y"]
        tol = {"float16": 3e-2, "bfloat16": 8e-2}.get(dtype, 1e-4)
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * float(np.abs(want).max()))
        from devicelayer.kernels.runner import vendor_of

        steps = {s.node.name: s for s in plan._prepared.steps if s.kind == "node"}
        ops = {k: vendor_of(s.op_plan) for k, s in steps.items()}
        attrs5 = {"pads": [2] * 4, "strides": [1, 1], "dilations": [1, 1], "group": e, "activation": None}
        t5 = np.dtype(dtype)
        ins5 = [TensorType((2, e, s, s), t5), TensorType((e, 1, 5, 5), t5), TensorType((e,), t5)]
        assert ops["dw5"].route(ins5, [TensorType((2, e, s, s), t5)], attrs5, tune=False, last=True)[0] == "direct"
        assert ops["dw5"]._binding == (frozenset({0}), True) and ops["dw7"]._binding == (frozenset({0}), True)
        assert (ops["dw5"]._taps is None) == fed and ops["dw7"]._taps is not None
        assert ops["project"]._binding == (frozenset({0}), True)  # (its summand is the caller's x)
        assert ops["last"]._binding == (frozenset({0}), False)
        aliases = [k for k, st in steps.items() if st.node.op == "transpose" and not st.op_plan.temps
                   and vendor_of(st.op_plan) is None and type(st.op_plan.steps[0]).__name__ == "Alias"]
        assert len(aliases) == 2
        gated = [st for st in steps.values() if st.types is not None]
        assert gated, "the gate's product ran in the graph's layout"
    finally:
        plan.release()


def test_a_stored_choice_is_taken_back(rng, tmp_path, monkeypatch):
    monkeypatch.setenv("DEVICELAYER_CACHE", str(tmp_path))
    cuda_conv, cuda_dnn = _module("conv"), _module("dnn")
    if cuda_dnn.library() is None:
        pytest.skip("cuDNN is not installed")
    dev = CUDA[0]
    dev._conv_routes.clear()
    t = np.dtype(np.float16)
    attrs = {"pads": [1] * 4, "strides": [1, 1], "dilations": [1, 1], "group": 24, "activation": None}
    ins, outs = [TensorType((2, 24, 9, 9), t), TensorType((24, 1, 3, 3), t)], [TensorType((2, 24, 9, 9), t)]
    op = dev.vendor_op("conv")
    key = cuda_conv._key(ins, outs, attrs, True)
    dev._tuned(cuda_conv.TUNED_KIND).put(repr(key), {"how": "direct", "times_ms": {"direct": 0.001}, "choice": [2, 8]})
    monkeypatch.setattr(cuda_conv, "routes_best", lambda dev, key: float("inf"))
    assert op.route(ins, outs, attrs, tune=False, last=True) == ("direct", (2, 8))
    dev._conv_routes.clear()
    dev._tuned(cuda_conv.TUNED_KIND).put(repr(key), {"how": "direct", "choice": [3, 3]})  # no such choice
    assert op.route(ins, outs, attrs, tune=False, last=True)[0] != "direct"

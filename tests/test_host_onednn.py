"""The host's oneDNN route: float32 convolutions and products through oneDNN, channels-last tensors kept between
oneDNN convolutions of a plan, and the NumPy route where oneDNN is absent or turned off.

Where oneDNN is installed (``DEVICELAYER_REQUIRE=onednn``, as scripts/test.sh sets, fails the session if it is
not) these run; elsewhere the module is skipped as a whole.
"""

from __future__ import annotations

import math
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.backends.host import dnnl as host_dnnl
from devicelayer.kernels.op import TensorType, get
from devicelayer.ops import names  # noqa: F401  (registers the op library)
from op_cases import graph_reference64

pytestmark = pytest.mark.skipif(host_dnnl.library() is None, reason="oneDNN is not installed")


def _reference(op, arrays, **attrs):
    types = [TensorType(a.shape, a.dtype) for a in arrays]
    checked, _ = get(op).prepare(types, dict(attrs))
    return get(op).reference([a.astype(np.float64) for a in arrays], checked)[0], checked


def _run_poisoned(op, arrays, shape, **attrs):
    host = dl.device("host")
    ins = [dl.tensor(a, host) for a in arrays]
    out = dl.tensor(np.full(shape, np.nan, np.float32), host)
    dl.ops.run(op, ins, out=[out], **attrs)
    return out.numpy()


def _route(ins, outs, attrs):
    host = dl.device("host")
    key = host.vendor_op("conv")._key(ins, outs, attrs)  # (the layer cache's key of this geometry)
    return host.onednn_layers[("conv", key, ())]


def _random_conv(rng):
    nd = int(rng.integers(1, 4))
    group = int(rng.choice([1, 1, 2, 3]))
    depthwise = rng.random() < 0.2
    cg = 1 if depthwise else int(rng.integers(1, 5))
    C = cg * group if not depthwise else group * int(rng.integers(1, 3))
    if depthwise:
        cg = C // group
    M = group * int(rng.integers(1, 5))
    k = [int(rng.integers(1, 4)) for _ in range(nd)]
    s = [int(rng.integers(1, 3)) for _ in range(nd)]
    d = [int(rng.integers(1, 3)) for _ in range(nd)]
    p = [int(rng.integers(0, 3)) for _ in range(2 * nd)]
    size = [int(rng.integers((ki - 1) * di + 1, (ki - 1) * di + 9)) for ki, di in zip(k, d)]
    x = rng.standard_normal((int(rng.integers(1, 3)), C, *size)).astype(np.float32)
    w = rng.standard_normal((M, cg, *k)).astype(np.float32)
    attrs = {"group": group, "strides": s, "dilations": d, "pads": p}
    arrays = [x, w]
    if rng.random() < 0.7:
        arrays.append(rng.standard_normal(M).astype(np.float32))
    return arrays, attrs


#: the conv activations beside relu and clip, with the parameters each takes
_ACTIVATIONS = {"leaky_relu": ("activation_alpha",), "elu": ("activation_alpha",), "sigmoid": (),
                "hard_sigmoid": ("activation_alpha", "activation_beta"), "hard_swish": (),
                "swish": ("activation_alpha",), "tanh": (), "gelu": (), "gelu_tanh": ()}


def _random_activation(rng):
    name = str(rng.choice(sorted(_ACTIVATIONS)))
    return {"activation": name, **{k: float(rng.uniform(0.05, 1.5)) for k in _ACTIVATIONS[name]
                                   if rng.random() < 0.7}}


def _unary_attrs(extra):
    """A conv's activation parameters as the elementwise op's attributes."""
    return {k.removeprefix("activation_"): v for k, v in extra.items() if k != "activation"}


def test_info_names_the_route():
    assert dl.device("host").info.extras["conv"].startswith(f"oneDNN {host_dnnl.version()} (")


def test_random_convolutions_through_onednn_match_the_float64_reference():
    rng = np.random.default_rng(20261121)
    for case in range(150):
        arrays, attrs = _random_conv(rng)
        ref, checked = _reference("conv", arrays, **attrs)
        extra = {}
        if rng.random() < 0.5 and len(arrays) == 3:  # the fused forms the ONNX loader makes: Z and ReLU
            z = rng.standard_normal(ref.shape).astype(np.float32)
            arrays.append(z)
            ref = ref + z
        pick = rng.random()
        if pick < 0.25:
            extra["activation"] = "relu"
            ref = np.maximum(ref, 0)
        elif pick < 0.5:  # the clip activation ReLU6 (conv -> clip) becomes on the host
            lo, hi = sorted(rng.standard_normal(2) * np.abs(ref).max() / 2)
            extra.update(activation="clip", activation_min=float(lo), activation_max=float(hi))
            ref = np.clip(ref, lo, hi)
        elif pick < 0.85:  # the other activations a conv takes on the host, with random parameters
            extra.update(_random_activation(rng))
            unary, _ = _reference(extra["activation"], [ref], **_unary_attrs(extra))
            ref = unary
        got = _run_poisoned("conv", arrays, ref.shape, **attrs, **extra)
        scale = np.abs(ref).max() + 1
        assert np.abs(got - ref).max() <= 2e-5 * scale, (case, [a.shape for a in arrays], attrs, extra)
        types = [TensorType(a.shape, a.dtype) for a in arrays]
        route = _route(types, [TensorType(ref.shape, np.float32)], get("conv").prepare(types, {**attrs, **extra})[0])
        assert route["layer"] is not None, route  # oneDNN ran it, not the NumPy fallback


def test_eager_output_over_its_input_is_computed_apart(rng):
    host = dl.device("host")
    x = rng.standard_normal((1, 8, 5, 5)).astype(np.float32)
    w = rng.standard_normal((8, 8, 1, 1)).astype(np.float32)
    want, _ = _reference("conv", [x, w])
    tx = dl.tensor(x, host)
    dl.ops.run("conv", [tx, dl.tensor(w, host)], out=[tx])
    np.testing.assert_allclose(tx.numpy(), want, rtol=2e-5, atol=2e-5)


def _resnet_block(g, x, c, rng, name):
    """conv-relu, conv-relu, conv + x (Z), relu: the residual block the ONNX loader fuses."""
    def weights(m, cin, k):
        return g.constant((rng.standard_normal((m, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32))
    bias = g.constant(rng.standard_normal(c).astype(np.float32))
    a = g.conv(x, weights(c, c, 1), bias, activation="relu", name=f"{name}a")
    b = g.conv(a, weights(c, c, 3), bias, pads=[1, 1, 1, 1], activation="relu", name=f"{name}b")
    return g.conv(b, weights(c, c, 1), bias, x, activation="relu", name=f"{name}c")


def test_channels_last_stays_between_onednn_convolutions_only(rng):
    g = dl.Graph()
    x = g.input("x", (1, 16, 9, 9))
    h = _resnet_block(g, x, 16, rng, "b1")
    h = _resnet_block(g, h, 16, rng, "b2")
    side = g.tanh(h, name="side")  # a NumPy reader (tanh runs NumPy below 4096 elements): h stays NCHW
    h = _resnet_block(g, h, 16, rng, "b3")
    g.output("y", h)
    g.output("side", side)
    plan = g.compile(["host"])
    feeds = {"x": rng.standard_normal((1, 16, 9, 9)).astype(np.float32)}
    got, want = plan(**feeds), graph_reference64(g, feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)
    from devicelayer.kernels.runner import vendor_of

    bindings = {s.node.name: vendor_of(s.op_plan)._binding for s in plan._prepared.steps if s.kind == "node"
                and vendor_of(s.op_plan) is not None}
    assert bindings["b1a"].in_last == frozenset() and bindings["b1a"].out_last  # x comes from the caller
    assert bindings["b1c"].out_last and bindings["b2c"].in_last == {0, 3}
    assert not bindings["b2c"].out_last  # tanh reads it
    assert bindings["b3a"].in_last == frozenset() and not bindings["b3c"].out_last  # a graph output
    assert bindings["b2a"].weights is not None  # constant weights prepared once


@pytest.mark.parametrize("other", [d.id for d in dl.devices() if d.id != "host"][:2])
def test_a_tensor_another_device_reads_stays_nchw(other, rng):
    g = dl.Graph()
    x = g.input("x", (1, 8, 7, 7))
    h = _resnet_block(g, x, 8, rng, "a")
    far = g.tanh(h, name="far")
    h2 = _resnet_block(g, h, 8, rng, "b")
    g.output("y", h2)
    g.output("far", far)
    placement = {n.name: "host" for n in g.nodes}
    placement["far"] = other
    plan = g.compile(["host", other], placement=placement)
    feeds = {"x": rng.standard_normal((1, 8, 7, 7)).astype(np.float32)}
    got, want = plan(**feeds), graph_reference64(g, feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("ta,tb,alpha,beta,c_shape", [
    (False, False, 1.0, 1.0, None), (True, False, 0.5, 2.0, (70,)), (False, True, -1.5, 1.0, (80, 1)),
    (True, True, 2.0, 0.25, (80, 70)), (False, False, 1.0, 3.0, (1, 70)), (False, True, 1.0, 1.0, ()),
])
def test_gemm_through_sgemm(ta, tb, alpha, beta, c_shape, rng):
    # 80 x 60 x 70: above gemm.NUMPY_MNK, where the small products run NumPy's
    a = rng.standard_normal((60, 80) if ta else (80, 60)).astype(np.float32)
    b = rng.standard_normal((70, 60) if tb else (60, 70)).astype(np.float32)
    arrays = [a, b] + ([rng.standard_normal(c_shape).astype(np.float32)] if c_shape is not None else [])
    attrs = {"transA": int(ta), "transB": int(tb), "alpha": alpha, "beta": beta}
    want, _ = _reference("gemm", arrays, **attrs)
    assert dl.device("host").vendor_op("gemm").accepts(
        [TensorType(x.shape, x.dtype) for x in arrays], [TensorType(want.shape, np.float32)],
        get("gemm").prepare([TensorType(x.shape, x.dtype) for x in arrays], dict(attrs))[0])
    np.testing.assert_allclose(_run_poisoned("gemm", arrays, want.shape, **attrs), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("a_shape,b_shape", [((4, 6), (6, 3)), ((2, 3, 4, 6), (6, 5)), ((3, 4, 6), (3, 6, 2)),
                                             ((2, 4, 6), (1, 6, 2)), ((6,), (6, 3))])
def test_matmul_through_sgemm_or_numpy(a_shape, b_shape, rng):
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    want, _ = _reference("matmul", [a, b])
    np.testing.assert_allclose(_run_poisoned("matmul", [a, b], want.shape), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("a_shape,b_shape,sgemm", [
    ((2, 40, 80), (80, 90), True), ((1, 90, 80), (1, 80, 70), True), ((25, 64), (64, 64), False),
    ((3, 90, 80), (3, 80, 70), True), ((4, 25, 16), (4, 16, 25), False), ((90, 80), (80,), False)])
def test_sgemm_takes_one_large_product_and_numpy_the_rest(a_shape, b_shape, sgemm, rng):
    """Products above NUMPY_MNK multiply-adds a matrix go to sgemm; small ones and 1-D operands run NumPy."""
    from devicelayer.backends.host import gemm

    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    want, checked = _reference("matmul", [a, b])
    types = [TensorType(a.shape, a.dtype), TensorType(b.shape, b.dtype)]
    assert dl.device("host").vendor_op("matmul").accepts(types, [TensorType(want.shape, np.float32)], checked) \
        is sgemm
    assert (a.size // a.shape[-1] * b.shape[-1] * a.shape[-1] > gemm.NUMPY_MNK) or not sgemm
    np.testing.assert_allclose(_run_poisoned("matmul", [a, b], want.shape), want, rtol=1e-4, atol=1e-4)


def _info_conv(env: dict[str, str]) -> str:
    code = "import json, devicelayer as dl; print(json.dumps(dl.device('host').info.extras['conv']))"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                         timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_turned_off_leaves_numpy():
    assert _info_conv({"DEVICELAYER_ONEDNN": "0", "DEVICELAYER_BACKENDS": "host"}).startswith("NumPy")


@pytest.mark.parametrize("setting", ["/nonexistent/libdnnl.so.3", "/etc/hostname"])
def test_a_wrong_library_path_falls_through_to_the_installed_one(setting):
    # a missing file, or a file that is no library: skipped, and the search goes on as without the setting (to
    # the copy this environment installed, or to NumPy where oneDNN was reachable only through the setting)
    unset = _info_conv({"DEVICELAYER_ONEDNN": "", "DEVICELAYER_BACKENDS": "host"})
    assert _info_conv({"DEVICELAYER_ONEDNN": setting, "DEVICELAYER_BACKENDS": "host"}) == unset
    if not os.environ.get("DEVICELAYER_ONEDNN"):
        assert unset.startswith(f"oneDNN {host_dnnl.version()}")


def test_convolutions_it_cannot_take_run_numpy(rng):
    host = dl.device("host")
    x = rng.standard_normal((1, 4, 6, 6))
    w = rng.standard_normal((3, 4, 3, 3))
    want, checked = _reference("conv", [x, w])
    np.testing.assert_allclose(dl.ops.run("conv", [dl.tensor(x, host), dl.tensor(w, host)])[0].numpy(), want,
                               rtol=1e-12, atol=1e-12)
    assert not host.vendor_op("conv").accepts([TensorType(x.shape, x.dtype), TensorType(w.shape, w.dtype)],
                                              [TensorType(want.shape, np.float64)], checked)


# -- pools, batch normalization, channel shuffle and concat through oneDNN -------------------------------------

def _random_pool(rng, op):
    nd = int(rng.integers(1, 4))
    k = [int(rng.integers(1, 4)) for _ in range(nd)]
    d = [int(rng.integers(1, 3)) for _ in range(nd)]
    attrs = {"kernel_shape": k, "strides": [int(rng.integers(1, 4)) for _ in range(nd)], "dilations": d,
             "ceil_mode": int(rng.integers(0, 2))}
    if rng.random() < 0.2:
        attrs["auto_pad"] = str(rng.choice(["SAME_UPPER", "SAME_LOWER", "VALID"]))
    else:
        attrs["pads"] = [int(rng.integers(0, ki)) for ki in k + k]
    if op == "average_pool":
        attrs["count_include_pad"] = int(rng.integers(0, 2))
    size = [int(rng.integers((ki - 1) * di + 1, (ki - 1) * di + 9)) for ki, di in zip(k, d)]
    return rng.standard_normal((int(rng.integers(1, 3)), int(rng.integers(1, 9)), *size)).astype(np.float32), attrs


def _onednn_ran(op, arrays, out_shape, checked):
    """Whether the host's oneDNN layer for this call exists (built by the call just made)."""
    vendor = dl.device("host").vendor_op(op)
    return vendor.route([TensorType(a.shape, a.dtype) for a in arrays], [TensorType(out_shape, np.dtype(np.float32))],
                        checked) is not None


@pytest.mark.parametrize("op", ["max_pool", "average_pool"])
def test_random_pools_match_the_float64_reference(op):
    rng = np.random.default_rng(7 if op == "max_pool" else 8)
    through = 0
    for case in range(120):
        x, attrs = _random_pool(rng, op)
        ref, checked = _reference(op, [x], **attrs)
        got = _run_poisoned(op, [x], ref.shape, **attrs)
        assert np.abs(got - ref).max() <= 1e-5 * (np.abs(ref).max() + 1), (case, x.shape, attrs)
        through += _onednn_ran(op, [x], ref.shape, checked)
    assert through >= 80  # most geometries run oneDNN (the rest: windows in padding only, ceil past the pads)


@pytest.mark.parametrize("op", ["global_average_pool", "global_max_pool"])
@pytest.mark.parametrize("shape", [(2, 5, 7), (1, 9, 6, 4), (2, 3, 2, 3, 4)])
def test_global_pools_through_onednn(op, shape, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    ref, checked = _reference(op, [x])
    np.testing.assert_allclose(_run_poisoned(op, [x], ref.shape), ref, rtol=1e-5, atol=1e-6)
    assert _onednn_ran(op, [x], ref.shape, checked)


def test_average_pool_counting_padding_past_the_end_pad_runs_numpy(rng):
    # ceil_mode adds a window reaching past the end pad: the op counts none of it, oneDNN would count it all
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1, "count_include_pad": 1}
    ref, checked = _reference("average_pool", [x], **attrs)
    np.testing.assert_allclose(_run_poisoned("average_pool", [x], ref.shape, **attrs), ref, rtol=1e-6, atol=1e-6)
    assert not _onednn_ran("average_pool", [x], ref.shape, checked)
    attrs["count_include_pad"] = 0  # excluding padding, the extra window is padding excluded as well: oneDNN
    ref, checked = _reference("average_pool", [x], **attrs)
    np.testing.assert_allclose(_run_poisoned("average_pool", [x], ref.shape, **attrs), ref, rtol=1e-6, atol=1e-6)
    assert _onednn_ran("average_pool", [x], ref.shape, checked)


@pytest.mark.parametrize("shape", [(2, 5, 7), (1, 16, 6, 4), (2, 3, 2, 3, 4)])
@pytest.mark.parametrize("activation", [None, "relu"])
def test_batch_normalization_through_onednn(shape, activation, rng):
    c = shape[1]
    arrays = [rng.standard_normal(shape).astype(np.float32), rng.standard_normal(c).astype(np.float32),
              rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32),
              rng.uniform(0.2, 2.0, c).astype(np.float32)]
    attrs = {"epsilon": 1e-3, **({"activation": activation} if activation else {})}
    ref, checked = _reference("batch_normalization", arrays, **attrs)
    np.testing.assert_allclose(_run_poisoned("batch_normalization", arrays, shape, **attrs), ref, rtol=1e-5,
                               atol=1e-5)
    assert _onednn_ran("batch_normalization", arrays, shape, checked)


@pytest.mark.parametrize("shape,group", [((2, 6, 3, 4), 2), ((1, 12, 5), 3), ((1, 12, 2, 3, 2), 4), ((1, 8, 3, 3), 8)])
def test_channel_shuffle_through_onednn(shape, group, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    ref, checked = _reference("channel_shuffle", [x], group=group)
    np.testing.assert_array_equal(_run_poisoned("channel_shuffle", [x], shape, group=group), ref.astype(np.float32))
    assert _onednn_ran("channel_shuffle", [x], shape, checked)


def test_channel_concat_through_onednn_and_other_axes_through_numpy(rng):
    arrays = [rng.standard_normal((2, c, 5, 3)).astype(np.float32) for c in (3, 1, 6)]
    ref, checked = _reference("concat", arrays, axis=1)
    np.testing.assert_array_equal(_run_poisoned("concat", arrays, ref.shape, axis=1), ref.astype(np.float32))
    assert _onednn_ran("concat", arrays, ref.shape, checked)
    arrays = [rng.standard_normal((2, 3, 5, c)).astype(np.float32) for c in (3, 1)]
    ref, checked = _reference("concat", arrays, axis=-1)
    np.testing.assert_array_equal(_run_poisoned("concat", arrays, ref.shape, axis=-1), ref.astype(np.float32))
    assert not _onednn_ran("concat", arrays, ref.shape, checked)


def _last(a):
    """``a`` (N, C, spatial...) as channels-last memory, flat."""
    return np.ascontiguousarray(np.moveaxis(a, 1, -1)).reshape(-1)


def _layer_in_layouts(op, arrays, out_shape, attrs, in_last, out_last):
    """The op's oneDNN layer run on ``arrays`` with inputs ``in_last`` and the output in channels-last memory."""
    vendor = dl.device("host").vendor_op(op).with_layout(frozenset(in_last), out_last)
    checked, _ = get(op).prepare([TensorType(a.shape, a.dtype) for a in arrays], dict(attrs))
    layer = vendor.route([TensorType(a.shape, a.dtype) for a in arrays], [TensorType(out_shape, np.dtype(np.float32))],
                         checked)
    assert layer is not None
    mem = [_last(a) if i in in_last else np.ascontiguousarray(a).reshape(-1) for i, a in enumerate(arrays)]
    y = np.full(int(np.prod(out_shape)), np.nan, np.float32)
    vendor._call(layer, [m.ctypes.data for m in mem] + [y.ctypes.data], vendor._binding)()
    if out_last:
        lead = (out_shape[0], *out_shape[2:], out_shape[1])
        return np.moveaxis(y.reshape(lead), -1, 1)
    return y.reshape(out_shape)


@pytest.mark.parametrize("x_last", [False, True])
@pytest.mark.parametrize("y_last", [False, True])
def test_layers_read_and_write_either_layout(x_last, y_last, rng):
    x = rng.standard_normal((2, 6, 5, 7)).astype(np.float32)
    params = [rng.standard_normal(6).astype(np.float32) for _ in range(3)] + [rng.uniform(0.5, 2, 6).astype(np.float32)]
    cases = [("max_pool", [x], {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1]}),
             ("average_pool", [x], {"kernel_shape": [2, 3], "strides": [1, 2], "pads": [1, 1, 0, 1]}),
             ("batch_normalization", [x, *params], {"activation": "relu"}),
             ("channel_shuffle", [x], {"group": 3})]
    for op, arrays, attrs in cases:
        ref, _ = _reference(op, arrays, **attrs)
        got = _layer_in_layouts(op, arrays, ref.shape, attrs, {0} if x_last else set(), y_last)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5, err_msg=op)
    parts = [rng.standard_normal((2, c, 5, 7)).astype(np.float32) for c in (2, 5, 3)]
    ref, _ = _reference("concat", parts, axis=1)
    got = _layer_in_layouts("concat", parts, ref.shape, {"axis": 1}, {1} if x_last else {0, 2}, y_last)
    np.testing.assert_array_equal(got, ref.astype(np.float32))


def _weights(g, rng, m, c, k):
    return g.constant((rng.standard_normal((m, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32))


def test_channels_last_flows_through_pools_norms_shuffles_concats_and_pointwise_ops(rng):
    g = dl.Graph()
    x = g.input("x", (1, 8, 12, 12))
    a = g.conv(x, _weights(g, rng, 8, 8, 3), pads=[1, 1, 1, 1], name="a")
    p = g.max_pool(a, kernel_shape=[2, 2], strides=[2, 2], name="pool")
    b = g.conv(p, _weights(g, rng, 12, 8, 1), name="b")
    s = g.channel_shuffle(b, group=3, name="shuffle")
    n = g.batch_normalization(s, *[g.constant(rng.uniform(0.5, 1.5, 12).astype(np.float32)) for _ in range(4)],
                              activation="relu", name="norm")
    c = g.conv(n, _weights(g, rng, 4, 12, 3), pads=[1, 1, 1, 1], name="c")
    r = g.relu(c, name="relu")  # pointwise: carries the layout
    half = g.mul(r, g.constant(np.float32(0.5)), name="half")  # a one-element operand broadcasts in any layout
    both = g.add(half, c, name="both")  # two same-shape operands, both channels-last
    e = g.conv(n, _weights(g, rng, 4, 12, 1), name="e")
    biased = g.add(e, g.constant(rng.standard_normal((1, 4, 1, 1)).astype(np.float32)), name="biased")
    cat = g.concat(both, biased, p, axis=1, name="cat")
    y = g.conv(cat, _weights(g, rng, 6, 16, 1), name="d")
    z = g.global_average_pool(y, name="gap")
    g.output("z", z)
    plan = g.compile(["host"])
    feeds = {"x": rng.standard_normal((1, 8, 12, 12)).astype(np.float32)}
    got, want = plan(**feeds), graph_reference64(g, feeds)
    np.testing.assert_allclose(got["z"], want["z"], rtol=1e-4, atol=1e-4)
    from devicelayer.kernels.runner import vendor_of

    steps = {s.node.name: s for s in plan._prepared.steps if s.kind == "node"}
    binding = {name: vendor_of(s.op_plan)._binding for name, s in steps.items() if vendor_of(s.op_plan) is not None}
    assert binding["a"].out_last and binding["pool"].in_last == {0} and binding["pool"].out_last
    assert binding["b"].in_last == {0} and binding["shuffle"].in_last == {0} and binding["norm"].out_last
    assert binding["c"].in_last == {0} and binding["c"].out_last  # relu, mul by a scalar and add carry it
    # an add of a per-channel (1, C, 1, 1) operand takes it too (that operand's memory is one in both layouts)
    assert binding["e"].out_last and binding["biased"].in_last == {0} and binding["biased"].out_last
    assert binding["cat"].in_last == {0, 1, 2} and binding["cat"].out_last
    assert binding["d"].in_last == {0} and binding["d"].out_last and binding["gap"].in_last == {0}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to see a pin")
def test_loading_onednn_with_omp_proc_bind_leaves_the_callers_cpus():
    # libgomp pins the thread that loads it under OMP_PROC_BIND; threads that thread starts later would inherit it
    code = ("import os, json, numpy as np, devicelayer as dl; before = sorted(os.sched_getaffinity(0)); "
            "h = dl.device('host'); x = np.ones((1, 4, 5, 5), np.float32); w = np.ones((4, 4, 3, 3), np.float32); "
            "y = dl.ops.run('conv', [dl.tensor(x, h), dl.tensor(w, h)])[0].numpy(); "
            "print(json.dumps([before, sorted(os.sched_getaffinity(0)), h.info.extras['conv'], float(y.max())]))")
    env = {**os.environ, "OMP_PROC_BIND": "true", "DEVICELAYER_BACKENDS": "host"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         check=True)
    before, after, route, top = json.loads(out.stdout.strip().splitlines()[-1])
    assert route.startswith("oneDNN") and top == 36.0
    assert after == before and len(after) >= 2


@pytest.mark.parametrize("op", sorted(__import__("devicelayer.backends.host.eltwise", fromlist=["x"]).STANDALONE))
def test_activations_through_onednn_eltwise_match_the_float64_reference(op, rng):
    from devicelayer.backends.host import eltwise

    host = dl.device("host")
    least = eltwise.min_elements(op)
    for n, routed in ((max(least, 4096) * 5, True), (least - 1, False)):
        x = (rng.standard_normal(n) * 4).astype(np.float32)
        x[:6] = [0.0, -0.0, 30.0, -30.0, 1e-6, -1e-6]
        want, checked = _reference(op, [x])
        alg, params = eltwise.ALGORITHMS[op]
        key = ("eltwise", (alg, n, *params(checked)), ())
        got = dl.ops.run(op, [dl.tensor(x, host)])[0].numpy()
        assert (key in host.onednn_layers) is routed, op
        scale = max(1.0, float(np.max(np.abs(want))))
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-5, atol=2e-5 * scale, err_msg=op)


def _same_specials(got, want, what):
    """NaN where ``want`` is NaN, the same infinities, and the finite rest close."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=what)
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want), err_msg=what)
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want), err_msg=what)
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite].astype(np.float64), want[finite], rtol=2e-5, atol=2e-5, err_msg=what)


@pytest.mark.parametrize("op", sorted(__import__("devicelayer.backends.host.eltwise", fromlist=["x"]).STANDALONE))
@pytest.mark.parametrize("in_place", [False, True])
def test_activations_through_onednn_keep_nans_and_infinities_as_numpy_does(op, in_place, rng):
    """A NaN, +infinity and -infinity among a tensor large enough for oneDNN: each output as NumPy's float64 form
    gives it (and onnxruntime: hard sigmoid and exp keep a NaN, GELU keeps +infinity), written over the input too,
    where oneDNN's own forms give 1, infinity or NaN and the call takes NumPy's form instead."""
    from devicelayer.backends.host import eltwise

    host = dl.device("host")
    n = max(eltwise.min_elements(op), 64)
    x = rng.standard_normal(n).astype(np.float32)
    x[:5] = [np.nan, np.inf, -np.inf, 0.0, np.nan]
    want, checked = _reference(op, [x])
    vendor = host.vendor_op(op)
    t = TensorType((n,), np.dtype(np.float32))
    assert vendor.accepts([t], [t], checked)
    src = dl.tensor(x, host)
    out = src if in_place else dl.tensor(np.full(n, 7.0, np.float32), host)
    for a in (src, out):
        a.ready.wait()
    call = vendor.bind([t], [t], checked, [src.buffer], [out.buffer])
    with np.errstate(all="ignore"):
        call()
    _same_specials(out.numpy(), want, op)
    if not in_place:  # (the same call on finite input: oneDNN's form, still right)
        y = rng.standard_normal(n).astype(np.float32)
        host.pool.upload(src.buffer, y).wait(30)
        call()
        _same_specials(out.numpy(), _reference(op, [y])[0], op)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_rows_with_nan_or_infinity_are_nan_as_numpy_makes_them(op, rng):
    """A row holding NaN or +infinity is NaN throughout (NumPy, onnxruntime); -infinity is an entry of 0 (or
    -infinity); the other rows as usual."""
    x = rng.standard_normal((6, 40)).astype(np.float32)
    x[0, 3], x[1, 0], x[2, 7], x[3, :] = np.nan, np.inf, -np.inf, -np.inf
    want, _ = _reference(op, [x], axis=-1)
    _same_specials(_run_poisoned(op, [x], x.shape, axis=-1), want, op)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape,axis", [((3, 700), -1), ((2, 5, 300), 1), ((4, 4, 64, 64), -1), ((7, 30), 0)])
def test_softmax_through_onednn_matches_the_float64_reference(op, shape, axis, rng):
    from devicelayer.backends.host import softmax

    host = dl.device("host")
    x = (rng.standard_normal(shape) * 5).astype(np.float32)
    x.reshape(-1)[:3] = [-np.inf, 40.0, -40.0]
    want, checked = _reference(op, [x], axis=axis)
    got = dl.ops.run(op, [dl.tensor(x, host)], axis=axis)[0].numpy()
    view = softmax.rows(shape, checked["axis"])
    routed = (op, view, ()) in host.onednn_layers
    assert routed is (x.size >= softmax.MIN_ELEMENTS and len(view) == 2)  # (an axis with elements after it: NumPy)
    scale = max(1.0, float(np.abs(want[np.isfinite(want)]).max()))
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-5, atol=2e-5 * scale)


@pytest.mark.parametrize("shape,axis,given", [((1, 25, 64), -1, 3), ((3, 7, 40), -1, 2), ((2, 5, 6, 8), -2, 3),
                                              ((4, 300), -1, 1), ((1, 1, 7), 0, 3),
                                              ((4, 128, 256), -1, 3)])  # (the last: on oneDNN's team)
def test_layer_normalization_through_onednn_matches_the_float64_reference(shape, axis, given, rng):
    host = dl.device("host")
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    params = [rng.standard_normal(shape[axis:]).astype(np.float32) for _ in range(given - 1)]
    want, checked = _reference("layer_normalization", [x, *params], axis=axis, epsilon=1e-3)
    got = _run_poisoned("layer_normalization", [x, *params], shape, axis=axis, epsilon=1e-3)
    view = (x.size // math.prod(shape[checked["axis"]:]), math.prod(shape[checked["axis"]:]))
    assert ("layer_normalization", view, (1e-3, given)) in host.onednn_layers
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-5, atol=2e-5)


def test_layer_normalization_onednn_does_not_take_runs_numpy(rng):
    """A scale broadcast from fewer elements, the statistics outputs and float64 stay on NumPy, and are right."""
    host = dl.device("host")
    x = rng.standard_normal((3, 16)).astype(np.float32)
    before = {k for k in host.onednn_layers if k[0] == "layer_normalization"}
    cases = [([x, np.float32([2.0])], {}), ([x, np.ones(16, np.float32)], {"stats": True}),
             ([x.astype(np.float64), np.ones(16)], {})]
    for arrays, attrs in cases:
        want, _ = _reference("layer_normalization", arrays, **attrs)
        got = dl.ops.run("layer_normalization", [dl.tensor(a, host) for a in arrays], **attrs)[0].numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert {k for k in host.onednn_layers if k[0] == "layer_normalization"} == before


@pytest.mark.parametrize("shape,perm", [((1, 56, 56, 96), (0, 3, 1, 2)), ((2, 8, 128, 64), (0, 3, 1, 2)),
                                        ((64, 64, 32), (2, 0, 1)), ((3, 1, 200, 300), (3, 1, 2, 0)),
                                        ((4, 5, 6, 7, 8, 9), (5, 3, 1, 0, 2, 4))])
def test_large_transposes_go_through_a_onednn_reorder_and_match_numpy(shape, perm, rng):
    from devicelayer.backends.host.transpose import simplified

    host = dl.device("host")
    x = rng.standard_normal(shape).astype(np.float32)
    got = _run_poisoned("transpose", [x], tuple(shape[p] for p in perm), perm=list(perm))
    np.testing.assert_array_equal(got, x.transpose(perm))
    assert ("transpose", simplified(shape, perm), ()) in host.onednn_layers


def test_small_float64_identity_and_overlapping_transposes_run_numpy(rng):
    host = dl.device("host")
    before = {k for k in host.onednn_layers if k[0] == "transpose"}
    for x, perm in [(rng.standard_normal((3, 4, 5)).astype(np.float32), (2, 0, 1)),  # small: the calling thread
                    (rng.standard_normal((64, 64, 32)), (2, 0, 1)),  # float64
                    (rng.standard_normal((64, 1, 1024)).astype(np.float32), (1, 0, 2)),  # an identity once simplified
                    (rng.standard_normal((4, 16, 8400)).astype(np.float32), (1, 0, 2))]:  # whole rows move
        got = dl.ops.run("transpose", [dl.tensor(x, host)], perm=list(perm))[0].numpy()
        np.testing.assert_array_equal(got, x.transpose(perm))
    assert {k for k in host.onednn_layers if k[0] == "transpose"} == before
    x = rng.standard_normal((128, 128)).astype(np.float32)  # an eager output over its own input: computed apart
    tx = dl.tensor(x, host)
    dl.ops.run("transpose", [tx], out=[tx], perm=[1, 0])
    np.testing.assert_array_equal(tx.numpy(), x.T)


def test_simplified_transposes_drop_unit_axes_and_merge_neighbours():
    from devicelayer.backends.host.transpose import simplified

    assert simplified((1, 56, 56, 384), (0, 3, 1, 2)) == ((3136, 384), (1, 0))
    assert simplified((2, 3, 4), (0, 1, 2)) == ((24,), (0,))
    assert simplified((2, 1, 4, 5), (2, 3, 1, 0)) == ((2, 20), (1, 0))
    assert simplified((1, 1), (1, 0)) == ((), ())


@pytest.mark.parametrize("op,fn", [("add", np.add), ("mul", np.multiply), ("sub", np.subtract), ("div", np.divide)])
@pytest.mark.parametrize("sa,sb", [((1, 3136, 48), (1, 3136, 48)), ((1, 3136, 48), (48,)), ((48,), (1, 3136, 48)),
                                   ((2, 16, 40, 40), (1, 16, 1, 1)), ((1, 16, 1, 1), (2, 16, 40, 40))])
def test_large_binary_ops_go_through_onednn_and_match_numpy(op, fn, sa, sb, rng):
    """One operand of the output's shape: oneDNN's binary primitive (the other broadcast; for sub and div only as
    the second operand), bit for bit NumPy's float32 result."""
    host = dl.device("host")
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32) + (4 if op == "div" else 0)
    want = fn(a, b)
    got = _run_poisoned(op, [a, b], want.shape)
    np.testing.assert_array_equal(got, want)
    routed = host.vendor_op(op).route([TensorType(a.shape, a.dtype), TensorType(b.shape, b.dtype)],
                                      [TensorType(want.shape, want.dtype)])
    assert (routed is not None) is (a.shape == want.shape or op in ("add", "mul"))


def _channels_last(a):
    """NCHW-shaped ``a`` as channels-last memory (flat)."""
    return np.ascontiguousarray(np.moveaxis(a, 1, -1)).reshape(-1)


@pytest.mark.parametrize("op,fn", [("add", np.add), ("mul", np.multiply), ("sub", np.subtract), ("div", np.divide)])
@pytest.mark.parametrize("sx,sc", [((2, 16, 40, 40), (1, 16, 1, 1)), ((1, 8, 5, 3), (8, 1, 1)),
                                   ((3, 4, 6), (3, 4, 1)), ((1, 6, 3, 4, 5), (1, 6, 1, 1, 1))])
@pytest.mark.parametrize("x_last,y_last", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("channel_first", [False, True])
def test_binary_ops_with_a_per_channel_operand_read_and_write_channels_last(op, fn, sx, sc, x_last, y_last,
                                                                            channel_first, rng):
    """A per-channel operand against a channels-last tensor (as a plan binds it: oneDNN's primitive where both
    ends are channels-last and the call is large, NumPy over views otherwise): NumPy's float32 result, each end
    in its layout, every output element written."""
    host = dl.device("host")
    x = rng.standard_normal(sx).astype(np.float32)
    c = rng.standard_normal(sc).astype(np.float32) + (4 if op == "div" else 0)
    ins = [c, x] if channel_first else [x, c]
    want = fn(*ins)
    full = 1 if channel_first else 0
    types = [TensorType(a.shape, a.dtype) for a in ins]
    out_type = TensorType(want.shape, want.dtype)
    vendor = host.vendor_op(op)
    assert vendor.offers_layout(types, [out_type], {}) and vendor.accepts(types, [out_type], {})
    bound = vendor.with_layout(frozenset({full} if x_last else ()), y_last)
    memory = [_channels_last(a) if (i == full and x_last) else a.reshape(-1) for i, a in enumerate(ins)]
    tensors = [dl.tensor(m, host) for m in memory]
    out = dl.tensor(np.full(want.size, np.nan, np.float32), host)
    for t in (*tensors, out):  # (their uploads may be queued on the worker; the bound call runs here)
        t.ready.wait()
    bound.bind(types, [out_type], {}, [t.buffer for t in tensors], [out.buffer])()
    expect = _channels_last(want) if y_last else want.reshape(-1)
    np.testing.assert_allclose(out.numpy(), expect, rtol=1e-6, atol=1e-6)


def test_binary_ops_that_stay_on_numpy_and_outputs_over_inputs(rng):
    host = dl.device("host")
    before = {k for k in host.onednn_layers if k[0] in ("add", "mul", "sub", "div")}
    cases = [(rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)),
             (rng.standard_normal((300, 1)).astype(np.float32), rng.standard_normal((1, 400)).astype(np.float32)),
             (rng.standard_normal((300, 400)), rng.standard_normal((300, 400)))]  # small, both broadcast, float64
    for a, b in cases:
        got = dl.ops.run("add", [dl.tensor(a, host), dl.tensor(b, host)])[0].numpy()
        np.testing.assert_array_equal(got, a + b)
    assert {k for k in host.onednn_layers if k[0] in ("add", "mul", "sub", "div")} == before
    a = rng.standard_normal((300, 400)).astype(np.float32)
    b = rng.standard_normal((300, 400)).astype(np.float32)
    ta, tb = dl.tensor(a, host), dl.tensor(b, host)
    dl.ops.run("sub", [ta, tb], out=[ta])  # in place over the first operand: oneDNN's own in-place form
    np.testing.assert_array_equal(ta.numpy(), a - b)
    ta = dl.tensor(a, host)
    dl.ops.run("sub", [ta, tb], out=[tb])  # over the second: computed apart
    np.testing.assert_array_equal(tb.numpy(), a - b)

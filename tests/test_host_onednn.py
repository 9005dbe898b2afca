"""The host's oneDNN route: float32 convolutions and products through oneDNN, channels-last tensors kept between
oneDNN convolutions of a plan, and the NumPy route where oneDNN is absent or turned off.

Where oneDNN is installed (``DEVICELAYER_REQUIRE=onednn``, as scripts/test.sh sets, fails the session if it is
not) these run; elsewhere the module is skipped as a whole.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.backends import host_dnnl
from devicelayer.kernels.op import TensorType, get
from devicelayer.ops import names  # noqa: F401  (registers the op library)

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
    key = (ins[0].dtype, tuple(t.shape for t in ins), outs[0].shape, tuple(attrs["pads"]), tuple(attrs["strides"]),
           tuple(attrs["dilations"]), attrs["group"], attrs.get("activation") == "relu")
    return host.conv_routes[key]


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
        if rng.random() < 0.5:
            extra["activation"] = "relu"
            ref = np.maximum(ref, 0)
        got = _run_poisoned("conv", arrays, ref.shape, **attrs, **extra)
        scale = np.abs(ref).max() + 1
        assert np.abs(got - ref).max() <= 2e-5 * scale, (case, [a.shape for a in arrays], attrs, extra)
        route = _route([TensorType(a.shape, a.dtype) for a in arrays], [TensorType(ref.shape, np.float32)],
                       {**checked, **extra})
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


def _numpy_graph(g, feeds):
    """The graph's outputs computed node by node in float64 (the reference)."""
    vals = {id(v): feeds[v.name].astype(np.float64) for v in g.inputs}
    for n in g.order():
        ins = [vals[id(v)] if v.constant is None else v.constant.astype(np.float64) for v in n.inputs]
        checked, _ = get(n.op).prepare([TensorType(a.shape, a.dtype) for a in ins], dict(n.attrs))
        for v, out in zip(n.outputs, get(n.op).reference(ins, checked)):
            vals[id(v)] = out
    return {name: vals[id(v)] for name, v in g.outputs.items()}


def test_channels_last_stays_between_onednn_convolutions_only(rng):
    g = dl.Graph()
    x = g.input("x", (1, 16, 9, 9))
    h = _resnet_block(g, x, 16, rng, "b1")
    h = _resnet_block(g, h, 16, rng, "b2")
    side = g.sigmoid(h, name="side")  # a NumPy reader: the tensor it reads stays NCHW
    h = _resnet_block(g, h, 16, rng, "b3")
    g.output("y", h)
    g.output("side", side)
    plan = g.compile(["host"])
    feeds = {"x": rng.standard_normal((1, 16, 9, 9)).astype(np.float32)}
    got, want = plan(**feeds), _numpy_graph(g, feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)
    from devicelayer.kernels.runner import vendor_of

    bindings = {s.node.name: vendor_of(s.op_plan)._binding for s in plan._prepared.steps if s.kind == "node"
                and vendor_of(s.op_plan) is not None}
    assert bindings["b1a"].in_last == frozenset() and bindings["b1a"].out_last  # x comes from the caller
    assert bindings["b1c"].out_last and bindings["b2c"].in_last == {0, 3}
    assert not bindings["b2c"].out_last  # sigmoid reads it
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
    got, want = plan(**feeds), _numpy_graph(g, feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("ta,tb,alpha,beta,c_shape", [
    (False, False, 1.0, 1.0, None), (True, False, 0.5, 2.0, (7,)), (False, True, -1.5, 1.0, (5, 1)),
    (True, True, 2.0, 0.25, (5, 7)), (False, False, 1.0, 3.0, (1, 7)), (False, True, 1.0, 1.0, ()),
])
def test_gemm_through_sgemm(ta, tb, alpha, beta, c_shape, rng):
    a = rng.standard_normal((3, 5) if ta else (5, 3)).astype(np.float32)
    b = rng.standard_normal((7, 3) if tb else (3, 7)).astype(np.float32)
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


def _info_conv(env: dict[str, str]) -> str:
    code = "import json, devicelayer as dl; print(json.dumps(dl.device('host').info.extras['conv']))"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                         timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_turned_off_leaves_numpy():
    assert _info_conv({"DEVICELAYER_ONEDNN": "0", "DEVICELAYER_BACKENDS": "host"}).startswith("NumPy")


@pytest.mark.parametrize("setting", ["/nonexistent/libdnnl.so.3", "/etc/hostname"])
def test_a_wrong_library_path_falls_through_to_the_installed_one(setting):
    # a missing file, or a file that is no library: skipped, and the copy this environment has is found next
    assert _info_conv({"DEVICELAYER_ONEDNN": setting, "DEVICELAYER_BACKENDS": "host"}).startswith(
        f"oneDNN {host_dnnl.version()}")


def test_convolutions_it_cannot_take_run_numpy(rng):
    host = dl.device("host")
    x = rng.standard_normal((1, 4, 6, 6))
    w = rng.standard_normal((3, 4, 3, 3))
    want, checked = _reference("conv", [x, w])
    np.testing.assert_allclose(dl.ops.run("conv", [dl.tensor(x, host), dl.tensor(w, host)])[0].numpy(), want,
                               rtol=1e-12, atol=1e-12)
    assert not host.vendor_op("conv").accepts([TensorType(x.shape, x.dtype), TensorType(w.shape, w.dtype)],
                                              [TensorType(want.shape, np.float64)], checked)

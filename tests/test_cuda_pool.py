"""CUDA pools through cuDNN: the calls it takes (and those it leaves to the op's kernels) against the float64
reference, and a plan keeping a CNN's activations channels-last through its pools."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.kernels import ops as _ops  # noqa: F401  (registers the ops)
from devicelayer.kernels.op import TensorType
from op_cases import graph_reference64, run_and_reference

CUDA = [d for d in dl.devices() if d.info.backend == "cuda"]
pytestmark = pytest.mark.skipif(not CUDA, reason="no CUDA device")
TOL = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2, "float64": 1e-12}


def _modules():
    package = type(CUDA[0]).__module__.rpartition(".")[0]
    dnn = importlib.import_module(f"{package}.dnn")
    if dnn.library() is None:
        pytest.skip("cuDNN is not installed")
    return importlib.import_module(f"{package}.conv"), importlib.import_module(f"{package}.pool")


POOLS = [
    ("max_pool", (2, 5, 17, 19), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, True),
    ("max_pool", (2, 4, 9, 8, 7), {"kernel_shape": [2, 3, 2], "strides": [1, 2, 2]}, True),
    ("average_pool", (2, 6, 15, 15), {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1],
                                      "count_include_pad": 1}, True),
    ("average_pool", (2, 6, 15, 15), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, True),
    ("global_average_pool", (2, 8, 96, 96), {}, True),
    ("global_max_pool", (3, 7, 5, 6), {}, True),
    ("global_average_pool", (2, 8, 3, 4, 5), {}, True),
    # left to the op's kernels: dilation, asymmetric pads, ceil_mode that adds a window, 1-D
    ("max_pool", (2, 3, 12, 12), {"kernel_shape": [3, 3], "dilations": [2, 2]}, False),
    ("max_pool", (2, 3, 12, 12), {"kernel_shape": [3, 3], "pads": [0, 1, 1, 0]}, False),
    ("average_pool", (2, 3, 12, 12), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, False),
    ("max_pool", (2, 3, 12), {"kernel_shape": [3]}, False),
]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("name, shape, attrs, taken", POOLS, ids=[f"{p[0]}-{i}" for i, p in enumerate(POOLS)])
def test_cudnn_takes_the_pools_it_computes_as_onnx_does(rng, name, shape, attrs, taken, dtype):
    _, cuda_pool = _modules()
    from devicelayer.kernels.op import get

    dev = CUDA[0]
    x = rng.standard_normal(shape).astype(dtype)
    x.flat[::7] = -np.abs(x.flat[::7]) - 3  # (negative windows: max must not see the padding as zero)
    op = get(name)
    checked = op.check([TensorType(x.shape, x.dtype)], attrs)
    outs = op.infer([TensorType(x.shape, x.dtype)], checked)
    vendor = dev.vendor_op(name)
    assert isinstance(vendor, cuda_pool.DnnPool)
    assert vendor.accepts([TensorType(x.shape, x.dtype)], outs, checked) == taken
    result = run_and_reference(dev, name, [x], attrs)
    if result is None:
        pytest.skip(f"{name} does not take {dtype} on {dev.id}")
    got, want, _ = result
    tol = TOL[dtype]
    np.testing.assert_allclose(got[0].astype(np.float64), want[0], rtol=tol, atol=tol)


def test_a_nan_in_a_window_is_its_maximum(rng):
    _modules()
    dev = CUDA[0]
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    x[0, 1, 2, 3] = np.nan
    got, want, _ = run_and_reference(dev, "max_pool", [x], {"kernel_shape": [2, 2], "strides": [2, 2]})
    assert np.isnan(got[0][0, 1, 1, 1]) and np.isnan(want[0][0, 1, 1, 1])
    np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(want[0]))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_a_cnn_stays_channels_last_through_its_pools(rng, tmp_path, monkeypatch, dtype):
    """stem conv -> max pool -> 1x1 and 3x3 convs -> global average pool: with channels-last faster, every
    tensor between them stays channels-last (the pools read and write it), the caller's input and the graph's
    output are converted; results match float64 with the arena poisoned."""
    monkeypatch.setenv("DEVICELAYER_CACHE", str(tmp_path))
    cuda_conv, cuda_pool = _modules()
    monkeypatch.setattr(cuda_conv, "routes_best", lambda dev, key: float("inf"))
    dev = CUDA[0]
    dev._conv_routes.clear()

    def weights(m, c, k):
        return g.constant((rng.standard_normal((m, c, k, k)) / np.sqrt(c * k * k)).astype(dtype))

    def bias(m):
        return g.constant(rng.standard_normal(m).astype(dtype))

    g = dl.Graph()
    x = g.input("x", (2, 3, 30, 30), dtype)
    h = g.conv(x, weights(16, 3, 5), bias(16), strides=[2, 2], pads=[2, 2, 2, 2], activation="relu", name="stem")
    h = g.max_pool(h, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], name="pool")
    a = g.conv(h, weights(16, 16, 1), bias(16), activation="relu", name="a")
    b = g.conv(a, weights(16, 16, 3), bias(16), pads=[1, 1, 1, 1], activation="relu", name="b")
    c = g.conv(b, weights(16, 16, 1), bias(16), h, activation="relu", name="c")
    g.output("y", g.global_average_pool(c, name="gap"))
    plan = g.compile([dev])
    feeds = {"x": rng.standard_normal((2, 3, 30, 30)).astype(dtype)}
    plan(**{"x": np.full_like(feeds["x"], np.nan)})
    got, want = plan(**feeds)["y"], graph_reference64(g, feeds)["y"]
    tol = {"float16": 2e-2, "bfloat16": 6e-2}.get(dtype, 1e-4)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * float(np.abs(want).max()))
    from devicelayer.kernels.runner import vendor_of

    inner = plan._plans()[0] if hasattr(plan, "_plans") else plan
    ops = {s.node.name: vendor_of(s.op_plan) for s in inner._prepared.steps if s.kind == "node"}
    assert isinstance(ops["pool"], cuda_pool.DnnPool) and isinstance(ops["gap"], cuda_pool.DnnPool)
    assert ops["stem"]._binding == (frozenset(), True)
    assert ops["pool"]._binding == (frozenset({0}), True)
    assert ops["c"]._binding == (frozenset({0, 3}), True)
    assert ops["gap"]._binding == (frozenset({0}), False)  # the graph's output: NCHW

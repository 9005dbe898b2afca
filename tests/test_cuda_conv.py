"""CUDA convolutions on each vendor route, forced: cuDNN (fused bias + ReLU where it takes them) and
im2col + cuBLAS, every conv case against the float64 reference; the tuning that picks between them; the
backend without cuDNN (``DEVICELAYER_CUDNN=0``)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.kernels import ops as _ops  # noqa: F401  (registers the ops)
from op_cases import all_cases, graph_reference64, run_and_reference

CUDA = [d for d in dl.devices() if d.info.backend == "cuda"]
pytestmark = pytest.mark.skipif(not CUDA, reason="no CUDA device")
CASES = [c for c in all_cases() if c.op == "conv"]
TOL = {"float32": 2e-5, "float16": 1e-2, "bfloat16": 4e-2}


def _conv_module():
    """cuda_conv and cuda_dnn as the CUDA backend in use imported them (its package may be an alias)."""
    package = type(CUDA[0]).__module__.rpartition(".")[0]
    return importlib.import_module(f"{package}.conv"), importlib.import_module(f"{package}.dnn")


@pytest.fixture(params=["dnn", "im2col"])
def route(request, monkeypatch):
    """Force every convolution onto one route where it can take the layer (others keep their own)."""
    cuda_conv, cuda_dnn = _conv_module()
    if request.param == "dnn" and cuda_dnn.library() is None:
        pytest.skip("cuDNN is not installed")
    taken = []

    def forced(self, ins, outs, attrs, tune=True):
        if request.param == "dnn":
            layer = self._layer(ins, outs, attrs)
            if layer is not None:
                taken.append("dnn")
                return ("dnn", layer)
        if cuda_conv.Im2colConv.accepts(self, ins, outs, attrs):
            taken.append("im2col")
            return ("im2col", None)
        taken.append("kernels")
        return ("kernels", None)

    monkeypatch.setattr(cuda_conv.DnnConv, "route", forced)
    return request.param, taken


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_conv_case_on_the_forced_route(route, rng, case):
    dev = CUDA[0]
    if dl.device(dev.id).vendor_op("conv") is None:
        pytest.skip("no vendor convolution (cuBLAS missing)")
    result = run_and_reference(dev, "conv", case.make(rng), case.attrs)
    if result is None:
        pytest.skip(f"{dev.id} does not take {case.dtype}")
    got, want, _ = result
    assert route[1], "the forced route was not consulted"
    tol = case.rtol or TOL[case.dtype]
    for g, w in zip(got, want):
        w = np.asarray(w)
        scale = max(1.0, float(np.max(np.abs(w)))) if w.size else 1.0
        np.testing.assert_allclose(g.astype(np.float64), w, rtol=tol, atol=tol * scale)


def test_the_routes_were_both_taken(route, rng):
    """The forced route really ran: asymmetric pads only im2col, symmetric ones the forced route."""
    name, taken = route
    dev = CUDA[0]
    x = rng.standard_normal((2, 8, 12, 12)).astype(np.float32)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    for pads, expected in (([1, 1, 1, 1], name), ([1, 0, 2, 1], "im2col")):
        before = len(taken)
        got, want, _ = run_and_reference(dev, "conv", [x, w], {"pads": pads, "activation": "relu"})
        np.testing.assert_allclose(got[0], want[0], rtol=2e-5, atol=2e-5 * float(np.abs(want[0]).max()))
        assert taken[before:] and set(taken[before:]) == {expected}


def test_tuning_times_both_routes_and_keeps_the_faster(rng, tmp_path, monkeypatch):
    monkeypatch.setenv("DEVICELAYER_CACHE", str(tmp_path))  # no choice stored by an earlier run
    cuda_conv, cuda_dnn = _conv_module()
    if cuda_dnn.library() is None:
        pytest.skip("cuDNN is not installed")
    dev = CUDA[0]
    x = rng.standard_normal((1, 16, 23, 23)).astype(np.float32)  # a geometry no other test uses
    w = rng.standard_normal((24, 16, 3, 3)).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    got, want, _ = run_and_reference(dev, "conv", [x, w, b], {"pads": [1, 1, 1, 1], "activation": "relu"})
    np.testing.assert_allclose(got[0], want[0], rtol=2e-5, atol=2e-5 * float(np.abs(want[0]).max()))
    found = [v for k, v in dev._conv_routes.items() if k[1] == ((1, 16, 23, 23), (24, 16, 3, 3), (24,))]
    assert len(found) == 1
    how, _, times = found[0]
    assert set(times) == {"dnn", "im2col"} and all(t > 0 for t in times.values())
    assert how == min(times, key=times.__getitem__)


def test_without_cudnn_the_backend_uses_im2col():
    env = {**os.environ, "DEVICELAYER_CUDNN": "0"}
    out = subprocess.run([sys.executable, "-m", "devicelayer.cli", "info", "--json"], capture_output=True,
                         text=True, env=env, timeout=120, check=True).stdout
    extras = next(d["extras"] for d in json.loads(out)["devices"] if d["backend"] == "cuda")
    assert extras["cudnn"] is None and extras["vendor_ops"]["conv"].startswith("im2col")


STORED_ROUTES = '''
import json, sys
sys.path.insert(0, "tests")
import numpy as np
import devicelayer as dl
from devicelayer.kernels import ops
from op_cases import run_and_reference

dev = next(d for d in dl.devices() if d.info.backend == "cuda")
rng = np.random.default_rng(7)
report = []
for shape, wshape, pads in (((1, 16, 19, 19), (20, 16, 3, 3), [1, 1, 1, 1]), ((2, 8, 17, 17), (8, 8, 1, 1), [0] * 4)):
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(wshape).astype(np.float32)
    got, want, _ = run_and_reference(dev, "conv", [x, w], {"pads": pads, "activation": "relu"})
    err = float(np.abs(got[0] - want[0]).max() / np.abs(want[0]).max())
    (how, _, times), = [v for k, v in dev._conv_routes.items() if k[1] == (shape, wshape)]
    report.append({"how": how, "stored": times.get("stored", False), "err": err})
print(json.dumps(report))
'''


def test_a_later_process_takes_the_stored_choices_without_timing(tmp_path):
    """Cold start: the routes and cuDNN algorithms one process measured are read back by the next (same disk
    cache), which times nothing; a corrupt cache file is measured anew."""
    env = {**os.environ, "DEVICELAYER_CACHE": str(tmp_path)}

    def run() -> list:
        out = subprocess.run([sys.executable, "-c", STORED_ROUTES], capture_output=True, text=True, env=env,
                             cwd=os.path.dirname(os.path.dirname(__file__)), timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    first, second = run(), run()
    assert [r["stored"] for r in first] == [False, False]
    assert [r["stored"] for r in second] == [True, True]
    assert [r["how"] for r in second] == [r["how"] for r in first]
    assert all(r["err"] < 2e-5 for r in first + second), (first, second)
    files = list((tmp_path / "tuned").glob("conv-*.json"))
    assert len(files) == 1
    files[0].write_text("{broken")
    assert [r["stored"] for r in run()] == [False, False]



def test_a_stored_workspace_is_taken_without_asking_cudnn(rng, monkeypatch):
    """A stored algorithm with its scratch size is adopted as it is (no cuDNN query); without a size, or with one
    over the limit, cuDNN is asked; the layer then computes right with the adopted choice."""
    cuda_conv, cuda_dnn = _conv_module()
    if cuda_dnn.library() is None:
        pytest.skip("cuDNN is not installed")
    dev = CUDA[0]
    dnn = dev._dnn()
    layer = dnn.layer(np.dtype(np.float32), (1, 8, 11, 11), (12, 8, 3, 3), (1, 12, 11, 11), (1, 1), (1, 1), (1, 1), 1,
                      False, False)
    asked = []
    real = dnn.lib.cudnnGetConvolutionForwardWorkspaceSize
    monkeypatch.setattr(dnn.lib, "cudnnGetConvolutionForwardWorkspaceSize", lambda *a: asked.append(1) or real(*a))
    assert dnn.adopt(layer, 1, 4096) and layer.pick() == (1, 4096) and not asked
    assert not dnn.adopt(layer, 99, 0) and not asked  # (no such algorithm)
    assert dnn.adopt(layer, 0) and len(asked) == 1 and layer.pick()[0] == 0
    dnn.adopt(layer, 1, cuda_dnn.WORKSPACE_LIMIT + 1)
    assert len(asked) == 2
    size = layer.pick()[1]
    assert dnn.adopt(layer, 1, size)
    x = rng.standard_normal((1, 8, 11, 11)).astype(np.float32)
    w = rng.standard_normal((12, 8, 3, 3)).astype(np.float32)
    import cupy

    with dev.cu_device:
        xs, ws = cupy.asarray(x), cupy.asarray(w)
        y = cupy.full((1, 12, 11, 11), np.nan, np.float32)
        scratch = cupy.empty(max(size, 1), np.uint8)
        stream = cupy.cuda.Stream(non_blocking=True)
        dnn.forward(layer, stream.ptr, xs.data.ptr, ws.data.ptr, 0, y.data.ptr, scratch.data.ptr)
        stream.synchronize()
        got = cupy.asnumpy(y)
    want = run_and_reference(dev, "conv", [x, w], {"pads": [1, 1, 1, 1]})[1][0]
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * float(np.abs(want).max()))


def _block(g, x, c, rng, name, dtype=np.float16, w3=None):
    """conv-relu (1x1), conv-relu (3x3; its filters ``w3`` where given, else a constant), conv (1x1) + x (the
    summand), relu."""
    def weights(m, cin, k):
        return g.constant((rng.standard_normal((m, cin, k, k)) / np.sqrt(cin * k * k)).astype(dtype))
    bias = g.constant(rng.standard_normal(c).astype(dtype))
    a = g.conv(x, weights(c, c, 1), bias, activation="relu", name=f"{name}a")
    b = g.conv(a, weights(c, c, 3) if w3 is None else w3, bias, pads=[1, 1, 1, 1], activation="relu",
               name=f"{name}b")
    return g.conv(b, weights(c, c, 1), bias, x, activation="relu", name=f"{name}c")


def _bound(plan):
    """node name -> the vendor op its step runs (the plan's steps after layouts were agreed)."""
    from devicelayer.kernels.runner import vendor_of

    inner = plan._plans()[0] if hasattr(plan, "_plans") else plan
    return {s.node.name: vendor_of(s.op_plan) for s in inner._prepared.steps if s.kind == "node"
            and vendor_of(s.op_plan) is not None}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("mode", ["channels-last", "ends-channels-last-computed-nchw", "nchw"])
def test_layers_keep_channels_last_between_them_where_it_is_faster(rng, tmp_path, monkeypatch, mode, dtype):
    """Convolutions that run faster channels-last keep their tensors so between them (1x1 layers as one cuBLASLt
    product over rows, the 3x3 ones through cuDNN with filters the plan relaid once); the ends a plan keeps NCHW
    (the caller's input, a graph output, a tanh reader) are converted; a layer whose ends are channels-last may
    still compute NCHW (its ends converted); results match float64."""
    monkeypatch.setenv("DEVICELAYER_CACHE", str(tmp_path))
    cuda_conv, cuda_dnn = _conv_module()
    if cuda_dnn.library() is None:
        pytest.skip("cuDNN is not installed")
    faster = mode != "nchw"
    monkeypatch.setattr(cuda_conv, "routes_best", lambda dev, key: float("inf") if faster else 0.0)
    pointwise = importlib.import_module(f"{type(CUDA[0]).__module__.rpartition('.')[0]}.pointwise_conv")
    tune = pointwise.tune
    monkeypatch.setattr(pointwise, "tune", lambda *a: (lambda found: found and (found[0], 0.0))(tune(*a)))
    # (the 1x1 layers take the product over rows: its time counts as nothing)
    if mode == "ends-channels-last-computed-nchw":
        monkeypatch.setattr(cuda_conv.DnnConv, "_computes_last", lambda self, ins, outs, attrs: False)
    dev = CUDA[0]
    dev._conv_routes.clear()  # routes decided by earlier tests would stand
    c = {"channels-last": 24, "nchw": 20, "ends-channels-last-computed-nchw": 16}[mode]  # geometries of their own
    g = dl.Graph()
    x = g.input("x", (2, c, 11, 11), dtype)
    h = _block(g, x, c, rng, "b1", dtype)
    h = _block(g, h, c, rng, "b2", dtype)
    side = g.tanh(h, name="side")  # the op kernels read it: NCHW
    h = _block(g, h, c, rng, "b3", dtype)
    g.output("y", h)
    g.output("side", side)
    plan = g.compile([dev])
    feeds = {"x": rng.standard_normal((2, c, 11, 11)).astype(dtype)}
    plan(**{"x": np.full_like(feeds["x"], np.nan)})  # the arena holds NaN where a run leaves it unwritten
    got, want = plan(**feeds), graph_reference64(g, feeds)
    tol = {"float16": 2e-2, "bfloat16": 6e-2}.get(dtype, 1e-4)
    for name in want:
        scale = float(np.abs(want[name]).max())
        np.testing.assert_allclose(got[name].astype(np.float64), want[name], rtol=tol, atol=tol * scale)
    ops = _bound(plan)
    bindings = {name: op._binding for name, op in ops.items()}
    if not faster:
        assert all(b == (frozenset(), False) for b in bindings.values())
        return
    assert bindings["b1a"] == (frozenset(), True)  # x comes from the caller
    assert bindings["b1c"][1] and bindings["b2c"][0] == {0, 3}
    assert not bindings["b2c"][1]  # tanh reads it
    assert bindings["b3a"][0] == frozenset() and bindings["b3c"] == ({0}, False)  # its summand: NCHW; y: an output
    from devicelayer.kernels.op import TensorType

    t = np.dtype(dtype)
    x_t, y_t = TensorType((2, c, 11, 11), t), TensorType((2, c, 11, 11), t)
    one = [x_t, TensorType((c, c, 1, 1), t), TensorType((c,), t)]
    attrs = {"pads": [0] * 4, "strides": [1, 1], "dilations": [1, 1], "group": 1, "activation": "relu"}
    assert ops["b2a"].route(one, [y_t], attrs, tune=False, last=True)[0] == "gemm"  # 1x1: one product over rows
    assert ops["b2b"]._filters_last is not None and ops["b2b"]._filters_last.shape == (c, 3, 3, c)


def test_filters_that_are_not_constant_are_relaid_at_each_run(rng, tmp_path, monkeypatch):
    """A channels-last 3x3 layer whose filters are a graph input (not a constant) relays them on each run."""
    monkeypatch.setenv("DEVICELAYER_CACHE", str(tmp_path))
    cuda_conv, cuda_dnn = _conv_module()
    if cuda_dnn.library() is None:
        pytest.skip("cuDNN is not installed")
    monkeypatch.setattr(cuda_conv, "routes_best", lambda dev, key: float("inf"))
    dev = CUDA[0]
    dev._conv_routes.clear()
    c = 12
    g = dl.Graph()
    x = g.input("x", (2, c, 9, 9), np.float16)
    w = g.input("w", (c, c, 3, 3), np.float16)
    g.output("y", _block(g, _block(g, x, c, rng, "p", w3=w), c, rng, "q", w3=w))
    plan = g.compile([dev])
    assert _bound(plan)["qb"]._last and _bound(plan)["qb"]._filters_last is None
    for _ in range(2):  # fresh filters each run
        feeds = {"x": rng.standard_normal((2, c, 9, 9)).astype(np.float16),
                 "w": (rng.standard_normal((c, c, 3, 3)) / 6).astype(np.float16)}
        got, want = plan(**feeds)["y"], graph_reference64(g, feeds)["y"]
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-2, atol=2e-2 * float(np.abs(want).max()))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("summand", [False, True])
def test_a_1x1_layer_over_rows_without_cublaslt_takes_cublas_and_the_epilogue(rng, dtype, summand):
    """The 1x1 product's fallback (cuBLAS's default product, then the epilogue pass over channels-last rows), as a
    call cuBLASLt refuses takes it, against float64."""
    cuda_conv, _ = _conv_module()
    pointwise = importlib.import_module(f"{type(CUDA[0]).__module__.rpartition('.')[0]}.pointwise_conv")
    import cupy

    from devicelayer.kernels.op import TensorType

    dev = CUDA[0]
    x = rng.standard_normal((2, 16, 5, 7)).astype(dtype)
    w = (rng.standard_normal((24, 16, 1, 1)) / 4).astype(dtype)
    b = rng.standard_normal(24).astype(dtype)
    z = rng.standard_normal((2, 24, 5, 7)).astype(dtype)
    attrs = {"pads": [0] * 4, "strides": [1, 1], "dilations": [1, 1], "group": 1, "activation": "relu"}
    arrays = [x, w, b, z] if summand else [x, w, b]
    want = run_and_reference(dev, "conv", arrays, attrs)[1][0]
    ins = [TensorType(a.shape, a.dtype) for a in arrays]
    outs = [TensorType((2, 24, 5, 7), np.dtype(dtype))]
    assert pointwise.takes(ins, outs, attrs)
    last = [np.ascontiguousarray(np.moveaxis(a, 1, -1)) if a.ndim == 4 and a is not w else a for a in arrays]
    with dev.cu_device:
        dev_arrays = [cupy.asarray(a) for a in last]
        y = cupy.full((2, 5, 7, 24), np.nan, dtype)
        stream = cupy.cuda.Stream(non_blocking=True)
        ptrs = [a.data.ptr for a in dev_arrays]
        pointwise.run(dev, stream, ins, outs, attrs, (None, 0), ptrs[0], ptrs[1], ptrs[2], y.data.ptr,
                      ptrs[3] if summand else 0)
        stream.synchronize()
        got = np.moveaxis(cupy.asnumpy(y).astype(np.float64), -1, 1)
    tol = TOL[dtype]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * float(np.abs(want).max()))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_cudnn_epilogue_fused_or_apart_gives_the_same_result(rng, dtype):
    """A layer's bias + summand + ReLU through cuDNN's fused call and through the backend's own pass agree."""
    cuda_conv, cuda_dnn = _conv_module()
    if cuda_dnn.library() is None:
        pytest.skip("cuDNN is not installed")
    dev = CUDA[0]
    op = dev.vendor_op("conv")
    x = rng.standard_normal((2, 8, 10, 10)).astype(dtype)
    w = (rng.standard_normal((12, 8, 3, 3)) / 6).astype(dtype)
    b = rng.standard_normal(12).astype(dtype)
    z = rng.standard_normal((2, 12, 10, 10)).astype(dtype)
    attrs = {"pads": [1, 1, 1, 1], "strides": [1, 1], "dilations": [1, 1], "group": 1, "activation": "relu"}
    want = run_and_reference(dev, "conv", [x, w, b, z], attrs)[1][0]
    from devicelayer.kernels.op import TensorType

    ins = [TensorType(a.shape, a.dtype) for a in (x, w, b, z)]
    outs = [TensorType(z.shape, z.dtype)]
    layer = op._layer(ins, outs, attrs)
    import cupy

    results = []
    with dev.cu_device:
        arrays = [cupy.asarray(a) for a in (x, w, b, z)]
        for fused in (True, False):
            layer.fused = fused
            y = cupy.full(z.shape, np.nan, dtype)
            stream = cupy.cuda.Stream(non_blocking=True)
            op._dnn_forward(stream, ins, outs, attrs, layer, *(a.data.ptr for a in arrays[:3]), y.data.ptr,
                            arrays[3].data.ptr)
            stream.synchronize()
            results.append(cupy.asnumpy(y).astype(np.float64))
    tol = TOL[dtype]
    for got in results:
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * float(np.abs(want).max()))

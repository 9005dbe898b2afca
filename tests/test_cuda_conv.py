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
from op_cases import all_cases, run_and_reference

CUDA = [d for d in dl.devices() if d.info.backend == "cuda"]
pytestmark = pytest.mark.skipif(not CUDA, reason="no CUDA device")
CASES = [c for c in all_cases() if c.op == "conv"]
TOL = {"float32": 2e-5, "float16": 1e-2}


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


"""CUDA products on each vendor route, forced: cuBLAS's default product and cuBLASLt's candidates (a bias row added
by the product's epilogue), every matmul and gemm case against the float64 reference; the fallback where an
operand is less aligned than cuBLASLt's candidates were chosen for; the tuning that picks among them and the disk
cache a later process reads it from."""

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
CASES = [c for c in all_cases() if c.op in ("matmul", "gemm")]
TOL = {"float32": 2e-5, "float16": 1e-2, "bfloat16": 2e-2, "float64": 1e-12}


def _modules():
    """cuda_gemm and cuda_blaslt as the CUDA backend in use imported them (its package may be an alias)."""
    package = type(CUDA[0]).__module__.rpartition(".")[0]
    return importlib.import_module(f"{package}.gemm"), importlib.import_module(f"{package}.blaslt")


@pytest.fixture(params=["cublas", "lt first", "lt last"])
def route(request, monkeypatch):
    """Force every product onto one route where it can take it: cuBLAS's default, or cuBLASLt's first or last
    heuristic candidate."""
    cuda_gemm, cuda_blaslt = _modules()
    if request.param != "cublas" and (cuda_blaslt.library() is None or CUDA[0]._lt() is None):
        pytest.skip("cuBLASLt is not available")
    taken = []

    def forced(self, ins, outs, attrs, tune=True):
        shape, tail = cuda_gemm.geometry(self.name, ins, attrs), cuda_gemm.tail_of(self.name, ins, outs, attrs)
        if request.param != "cublas" and shape is not None and tail is not None:
            product = self.dev._lt().product(ins[0].dtype, *shape, bias=tail.bias is not None,
                                             summand=tail.summand is not None, activation=tail.activation)
            if product.candidates:
                taken.append("lt")
                return (product, 0 if request.param == "lt first" else len(product.candidates) - 1)
        taken.append("cublas")
        return (None, 0)

    monkeypatch.setattr(cuda_gemm.VendorGemm, "route", forced)
    return request.param, taken


def _check(case, result):
    got, want, _ = result
    tol = case.rtol or TOL.get(case.dtype, 1e-2)
    for g, w in zip(got, want):
        w = np.asarray(w)
        scale = max(1.0, float(np.max(np.abs(w)))) if w.size else 1.0
        np.testing.assert_allclose(g.astype(np.float64), w, rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.op}-{c.id}" for c in CASES])
def test_every_product_case_on_the_forced_route(route, rng, case):
    dev = CUDA[0]
    if dl.device(dev.id).vendor_op(case.op) is None:
        pytest.skip("cuBLAS is missing")
    result = run_and_reference(dev, case.op, case.make(rng), case.attrs)
    if result is None:
        pytest.skip(f"{dev.id} does not take {case.dtype}")
    _check(case, result)


def test_the_lt_route_runs_bias_rows_in_its_epilogue(route, rng):
    """Gemm with a bias row (beta 1, alpha apart), a bias row under beta 2 (added after), a full C, a batch of
    matmuls: the forced route ran each, results right."""
    name, taken = route
    dev = CUDA[0]
    a = rng.standard_normal((48, 40)).astype(np.float32)
    b = rng.standard_normal((40, 72)).astype(np.float32)
    for c, attrs in ((rng.standard_normal(72), {"alpha": 1.5}), (rng.standard_normal((1, 72)), {"beta": 2.0}),
                     (rng.standard_normal((48, 72)), {"alpha": 0.5, "beta": 0.25})):
        before = len(taken)
        got, want, _ = run_and_reference(dev, "gemm", [a, b, c.astype(np.float32)], attrs)
        np.testing.assert_allclose(got[0], want[0], rtol=2e-5, atol=2e-5 * float(np.abs(want[0]).max()))
        assert taken[before:] and set(taken[before:]) == {"cublas" if name == "cublas" else "lt"}
    x = rng.standard_normal((6, 33, 20)).astype(np.float32)
    y = rng.standard_normal((6, 20, 44)).astype(np.float32)
    got, want, _ = run_and_reference(dev, "matmul", [x, y], {})
    np.testing.assert_allclose(got[0], want[0], rtol=2e-5, atol=2e-5 * float(np.abs(want[0]).max()))


def test_misaligned_operands_take_cublas(rng, monkeypatch, tmp_path):
    """Where an operand is less aligned than the candidates were chosen for, the call is cuBLAS's default
    product (here every operand is, by demanding more alignment than any has)."""
    cuda_gemm, cuda_blaslt = _modules()
    if CUDA[0]._lt() is None:
        pytest.skip("cuBLASLt is not available")
    refused = []
    real = cuda_blaslt.Product.run

    def counting(self, *args, **kw):
        ok = real(self, *args, **kw)
        refused.append(not ok)
        return ok

    monkeypatch.setenv("DEVICELAYER_CACHE", str(tmp_path))  # (the choices made here are all cuBLAS's)
    monkeypatch.setattr(cuda_blaslt, "ALIGNMENT", 1 << 62)
    monkeypatch.setattr(cuda_blaslt.Product, "run", counting)
    dev = CUDA[0]
    dev._gemm_routes.clear()
    for case in [c for c in CASES if c.dtype == "float32"][:12]:
        result = run_and_reference(dev, case.op, case.make(rng), case.attrs)
        if result is not None:
            _check(case, result)
    assert refused and all(refused)
    dev._gemm_routes.clear()  # (the routes tuned under the patched alignment are all cuBLAS)


def test_tuning_times_every_candidate_and_keeps_the_fastest(rng, tmp_path, monkeypatch):
    monkeypatch.setenv("DEVICELAYER_CACHE", str(tmp_path))  # no choice stored by an earlier run
    dev = CUDA[0]
    if dev._lt() is None:
        pytest.skip("cuBLASLt is not available")
    a = rng.standard_normal((96, 52)).astype(np.float32)  # a geometry no other test uses
    b = rng.standard_normal((52, 76)).astype(np.float32)
    c = rng.standard_normal(76).astype(np.float32)
    got, want, _ = run_and_reference(dev, "gemm", [a, b, c], {})
    np.testing.assert_allclose(got[0], want[0], rtol=2e-5, atol=2e-5 * float(np.abs(want[0]).max()))
    keys = [k for k in dev._gemm_routes if k[0] == "gemm" and k[2][2:5] == (96, 76, 52)]
    assert len(keys) == 1
    product, choice = dev._gemm_routes[keys[0]]
    cuda_gemm, _ = _modules()
    stored = dev._tuned(cuda_gemm.TUNED_KIND).get(repr(keys[0]))
    times = stored["times_ms"]
    assert "cublas" in times and any(k.startswith("lt ") for k in times) and all(t > 0 for t in times.values())
    best = min(times, key=times.__getitem__)
    assert stored["how"] == ("cublas" if best == "cublas" else "lt")
    assert (product is None) == (best == "cublas")
    if product is not None:
        assert f"lt {choice}" == best and product.bias


STORED = '''
import json, sys
sys.path.insert(0, "tests")
import numpy as np
import devicelayer as dl
from devicelayer.kernels import ops
from op_cases import run_and_reference

dev = next(d for d in dl.devices() if d.info.backend == "cuda")
rng = np.random.default_rng(7)
calls = []
package = type(dev).__module__.rpartition(".")[0]
import importlib
gemm = importlib.import_module(package + ".gemm")
real = gemm.VendorGemm._tune
gemm.VendorGemm._tune = lambda self, *a, **k: calls.append(1) or real(self, *a, **k)
errs = []
for m, k, n in ((37, 29, 61), (80, 48, 24)):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = rng.standard_normal(n).astype(np.float32)
    got, want, _ = run_and_reference(dev, "gemm", [a, b, c], {})
    errs.append(float(np.abs(got[0] - want[0]).max() / np.abs(want[0]).max()))
print(json.dumps({"timed": len(calls), "err": max(errs)}))
'''


def test_a_later_process_takes_the_stored_choices_without_timing(tmp_path):
    """Cold start: the choices one process measured are read back by the next (same disk cache), which times
    nothing; a corrupt cache file is measured anew."""
    env = {**os.environ, "DEVICELAYER_CACHE": str(tmp_path)}

    def run() -> dict:
        out = subprocess.run([sys.executable, "-c", STORED], capture_output=True, text=True, env=env,
                             cwd=os.path.dirname(os.path.dirname(__file__)), timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    first, second = run(), run()
    assert first["timed"] == 2 and second["timed"] == 0
    assert first["err"] < 2e-5 and second["err"] < 2e-5
    files = list((tmp_path / "tuned").glob("gemm-*.json"))
    assert len(files) == 1
    files[0].write_text("{broken")
    assert run()["timed"] == 2


def _products(plan):
    return [(n.op, [s[0] for s in n.attrs.get("epilogue") or ()]) for n in plan.graph.needed()]


@pytest.mark.parametrize("form", ["bias", "bias first", "residual then bias", "bias residual relu", "bias gelu",
                                  "gemm", "gemm gelu", "not taken"])
def test_a_chain_cublaslt_applies_is_the_product_epilogue(route, rng, form):
    """MatMul + a bias row (either operand order) + a summand of the output's shape + ReLU or GELU's tanh form, and
    Gemm (its C a bias row) + a summand or GELU, run as one cuBLAS call with the chain as its epilogue, results right
    against float64; a chain with a step it does not apply (a product by a row) stays a kernel after the product.
    On each forced route: cuBLASLt's epilogue, or cuBLAS's default product with the chain's kernels after it."""
    from test_fusion import close, poisoned_run, reference64

    dev = CUDA[0]
    if dev._lt() is None:
        pytest.skip("cuBLASLt is not available")
    g = dl.Graph()
    shape = (48, 40) if form.startswith("gemm") else (2, 24, 40)
    x = g.input("x", shape)
    w = g.constant(rng.standard_normal((40, 56)).astype(np.float32))
    b = g.constant(rng.standard_normal(56).astype(np.float32))
    out = shape[:-1] + (56,)
    r = g.input("r", out)
    if form == "gemm":
        y = g.add(g.gemm(x, w, b), r)
    elif form == "gemm gelu":
        y = g.gelu_tanh(g.gemm(x, w, b))
    else:
        p = g.matmul(x, w)
        y = {"bias": lambda: g.add(p, b), "bias first": lambda: g.add(b, p),
             "residual then bias": lambda: g.add(g.add(p, r), b),
             "bias residual relu": lambda: g.relu(g.add(g.add(p, b), r)),
             "bias gelu": lambda: g.gelu_tanh(g.add(p, b)),
             "not taken": lambda: g.mul(p, b)}[form]()
    g.output("y", y)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32), "r": rng.standard_normal(out).astype(np.float32)}
    plan = g.compile([dev])
    try:
        want = {"bias": ["add"], "bias first": ["add"], "residual then bias": ["add", "add"],
                "bias residual relu": ["add", "add", "relu"], "bias gelu": ["add", "gelu_tanh"], "gemm": ["add"],
                "gemm gelu": ["gelu_tanh"]}.get(form)
        got = _products(plan)
        if want is None:
            assert got == [("matmul", []), ("mul", [])]
        else:
            assert got == [("gemm" if form.startswith("gemm") else "matmul", want)]
            assert plan.kernel_counts()["after"] == 1
        result = poisoned_run(plan, feeds)
        close(result["y"], reference64(g, feeds)["y"], 2e-5)
    finally:
        plan.release()

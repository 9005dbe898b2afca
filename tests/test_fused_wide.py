"""The fused elementwise kernel with several elements a work item (``fused.wide_elements``: same-shaped inputs
and outputs moved by the dialect's WIDE_LOAD and WIDE_STORE, 16 bytes at once where the language has it), forced
on every kernel device: lengths that leave a partial run, broadcast operands, mixed dtypes, several outputs,
buffers too little aligned for a wide access; each against the op's NumPy reference with the outputs poisoned."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.kernels.op import TensorType, get
from devicelayer.kernels.ops import fused
from devicelayer.kernels.render import RENDERERS, WIDE_LANGUAGES
from devicelayer.tensors import Tensor


@pytest.fixture
def kernel_device(device, monkeypatch):
    if device.info.kernel_language == "python":
        pytest.skip("the host runs NumPy's form of the chain")
    monkeypatch.setattr(fused, "WIDE_LANGUAGES", frozenset(RENDERERS))  # (every language: its own form)
    monkeypatch.setattr(fused, "WIDE_MIN", 1)
    return device


def _steps(*steps):
    return tuple((op, attrs, tuple(operands)) for op, attrs, operands in steps)


CASES = {
    "bias and gelu, float16, a partial run": (
        [((3, 7, 45), np.float16), ((45,), np.float16)], _steps(("add", {}, (0, 1)), ("gelu", {}, (2,))), (1,)),
    "per-channel scale, silu, float32": (
        [((2, 6, 5, 7), np.float32), ((6, 1, 1), np.float32)],
        _steps(("mul", {}, (0, 1)), ("sigmoid", {}, (2,)), ("mul", {}, (2, 3))), (2,)),
    "a cast to float32 and two outputs": (
        [((5, 33), np.float16), ((5, 33), np.float16)],
        _steps(("add", {}, (0, 1)), ("cast", {"to": np.dtype(np.float32)}, (2,)), ("tanh", {}, (3,))), (0, 2)),
    "fewer elements than a run": ([((3,), np.float32), ((), np.float32)], _steps(("sub", {}, (0, 1)),), (0,)),
    "where over a mask": (
        [((4, 50), np.float32), ((4, 50), np.float32)],
        _steps(("greater", {}, (0, 1)), ("where", {}, (2, 0, 1))), (1,)),
}


def _needs(device, *dtypes):
    missing = [np.dtype(d).name for d in dtypes if np.dtype(d).name not in device.info.dtypes]
    if missing:
        pytest.skip(f"{device.id} has no {missing[0]}")


def _arrays(rng, specs):
    return [(rng.standard_normal(shape) * 2).astype(dtype) for shape, dtype in specs]


def _expected(arrays, steps, outputs):
    types = [TensorType(a.shape, a.dtype) for a in arrays]
    op = get("fused_elementwise")
    attrs, outs = op.prepare(types, {"steps": steps, "outputs": outputs})
    with np.errstate(all="ignore"):
        return op.reference(arrays, attrs), outs, attrs


@pytest.mark.parametrize("case", list(CASES))
def test_several_elements_a_work_item_against_numpy(kernel_device, case, rng):
    specs, steps, outputs = CASES[case]
    _needs(kernel_device, *(dtype for _, dtype in specs))
    arrays = _arrays(rng, specs)
    want, outs, attrs = _expected(arrays, steps, outputs)
    plan = get("fused_elementwise").plan([TensorType(a.shape, a.dtype) for a in arrays], outs, attrs,
                                         kernel_device.info)
    assert "WIDE_LOAD" in plan.steps[0].spec.body or all(a.shape != outs[0].shape for a in arrays)
    got = [dl.tensor(np.full(t.shape, np.nan if t.dtype.kind == "f" else 7, t.dtype), kernel_device) for t in outs]
    dl.ops.run("fused_elementwise", [dl.tensor(a, kernel_device) for a in arrays], out=got, steps=steps,
               outputs=outputs)
    for g, w in zip(got, want):
        tol = 2e-3 if w.dtype == np.float16 or any(a.dtype == np.float16 for a in arrays) else 2e-6
        np.testing.assert_allclose(g.numpy().astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol)


def test_buffers_too_little_aligned_for_a_wide_access(kernel_device, rng):
    """Inputs and output starting one element into their buffers: the runs that straddle take one element at a
    time."""
    dtype = np.dtype(np.float16 if "float16" in kernel_device.info.dtypes else np.float32)
    if kernel_device.info.view_alignment > dtype.itemsize:
        pytest.skip(f"{kernel_device.id} takes views at multiples of {kernel_device.info.view_alignment} bytes only")
    x, y = (rng.standard_normal(1000).astype(dtype) for _ in range(2))
    steps = _steps(("mul", {}, (0, 1)), ("exp", {}, (2,)))
    want, _, _ = _expected([x, y], steps, (1,))

    def shifted(a):
        held = dl.tensor(np.concatenate([np.zeros(1, a.dtype), a]), kernel_device)
        return held, Tensor(held.buffer.view(a.itemsize, a.nbytes, a.dtype), a.shape, a.dtype, held.ready)

    (_, xs), (_, ys) = shifted(x), shifted(y)
    out, view = shifted(np.full(1000, np.nan, dtype))
    dl.ops.run("fused_elementwise", [xs, ys], out=[view], steps=steps, outputs=(1,))[0].ready.wait()
    got = out.numpy()
    assert got[0] == 0  # (the element before the view is left alone)
    np.testing.assert_allclose(got[1:].astype(np.float64), want[0].astype(np.float64), rtol=2e-3, atol=2e-3)


def test_only_languages_with_wide_accesses_take_them_by_default(device):
    t = TensorType((64, 1024), np.dtype(np.float16))
    wide = fused.wide_elements([t, t], [t], device.info)
    assert wide == (8 if device.info.kernel_language in WIDE_LANGUAGES else 1)
    assert fused.wide_elements([t], [TensorType((4, 4), t.dtype)], device.info) == 1  # (too few elements)


LONE = {
    "add, same shapes, float16": ("add", {}, [((3, 7, 45), np.float16), ((3, 7, 45), np.float16)]),
    "mul by a per-channel scale, float32": ("mul", {}, [((2, 6, 5, 7), np.float32), ((6, 1, 1), np.float32)]),
    "greater, a bool result": ("greater", {}, [((5, 33), np.float32), ((5, 33), np.float32)]),
    "sigmoid, float16": ("sigmoid", {}, [((3, 101), np.float16)]),
    "leaky_relu with its alpha, float32": ("leaky_relu", {"alpha": 0.3}, [((7, 19), np.float32)]),
    "int32 sub": ("sub", {}, [((4, 9), np.int32), ((9,), np.int32)]),
}


@pytest.mark.parametrize("case", list(LONE))
def test_a_lone_pointwise_op_runs_as_a_wide_fused_kernel(kernel_device, case, rng):
    """A Unary or Binary op alone, where wide runs apply, plans the fused kernel of its one step
    (``fused.wide_plan``) and computes what its NumPy reference does, poisoned outputs filled."""
    name, attrs, specs = LONE[case]
    _needs(kernel_device, *(dtype for _, dtype in specs))
    arrays = [a if a.dtype.kind == "f" else (a * 10).astype(a.dtype) for a in _arrays(rng, specs)]
    op = get(name)
    types = [TensorType(a.shape, a.dtype) for a in arrays]
    checked, outs = op.prepare(types, dict(attrs))
    plan = op.plan(types, outs, checked, kernel_device.info)
    assert len(plan.steps) == 1 and plan.steps[0].spec.name.startswith("fused_")
    assert "WIDE_LOAD" in plan.steps[0].spec.body
    with np.errstate(all="ignore"):
        want = op.reference(arrays, checked)[0]
    got = dl.tensor(np.full(outs[0].shape, np.nan if outs[0].dtype.kind == "f" else 7, outs[0].dtype), kernel_device)
    dl.ops.run(name, [dl.tensor(a, kernel_device) for a in arrays], out=[got], **attrs)
    tol = 2e-3 if any(a.dtype == np.float16 for a in arrays) else 2e-6
    np.testing.assert_allclose(got.numpy().astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


def test_a_small_lone_op_keeps_its_own_kernel(device):
    """Below ``WIDE_MIN`` output elements (and on languages without wide accesses) the op's own kernel runs."""
    if device.info.kernel_language == "python":
        pytest.skip("the host runs NumPy")
    types = [TensorType((3, 5), np.float32)] * 2
    op = get("add")
    checked, outs = op.prepare(types, {})
    assert not op.plan(types, outs, checked, device.info).steps[0].spec.name.startswith("fused_")

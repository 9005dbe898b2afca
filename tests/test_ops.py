"""Every op case on every device, against the op's NumPy reference run in float64; outputs poisoned first."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.kernels.op import OPS, TensorType
from devicelayer.kernels.runner import run
from devicelayer.ops import names  # registers the library
from devicelayer.tensors import Tensor, tensor
from op_cases import all_cases, reference64

CASES = all_cases()
TOL = {"float32": (2e-5, 2e-5), "float16": (1e-2, 1e-2), "bfloat16": (4e-2, 4e-2), "float64": (1e-10, 1e-10)}


def poisoned(device, t: TensorType) -> Tensor:
    """A device tensor of type ``t`` filled with junk (NaN-ish floats, large ints): unwritten elements show."""
    nbytes = max(t.size * t.dtype.itemsize, t.dtype.itemsize)
    buf = device.pool.allocate(nbytes, t.dtype)
    junk = np.full(nbytes, 0x7F, np.uint8).view(t.dtype)  # NaN-ish floats, large ints
    ev = device.pool.upload(buf, junk)
    return Tensor(buf, t.shape, t.dtype, ev)


def reference(case, arrays):
    return reference64(case.op, arrays, case.attrs)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.op}[{c.id}]" for c in CASES])
def test_op_matches_reference(device, rng, case):
    if case.dtype not in device.info.dtypes:
        pytest.skip(f"{device.id} has no {case.dtype}")
    arrays = case.make(rng)
    op = OPS[case.op]
    types = [TensorType(a.shape, a.dtype) for a in arrays]
    attrs, out_types = op.prepare(types, dict(case.attrs))
    why = op.unsupported(types, attrs, device.info)
    if why is not None:
        pytest.skip(why)
    ins = [tensor(a, device) for a in arrays]
    outs = [poisoned(device, t) for t in out_types]
    run(case.op, ins, out=outs, **case.attrs)
    expected = reference(case, arrays)
    assert len(expected) == len(outs)
    for got_t, want, t in zip(outs, expected, out_types):
        got = got_t.numpy()
        assert got.shape == t.shape and got.dtype == t.dtype
        want = np.asarray(want)
        assert want.shape == t.shape, f"reference shape {want.shape} != inferred {t.shape}"
        if case.exact or t.dtype.kind in "iub":
            np.testing.assert_array_equal(got, want.astype(t.dtype))
        else:
            rtol, atol = TOL.get(t.dtype.name, (1e-5, 1e-5))
            scale = float(np.max(np.abs(want))) if want.size else 1.0
            np.testing.assert_allclose(got.astype(np.float64), want, rtol=case.rtol or rtol,
                                       atol=(case.atol or atol) * max(1.0, scale))
    for t in ins + outs:
        device.pool.free(t.buffer)


def test_every_op_has_cases():
    covered = {c.op for c in CASES}
    missing = sorted(set(names()) - covered)
    assert not missing, f"ops without test cases: {missing}"


@pytest.mark.parametrize("name", sorted(OPS))
def test_unknown_attribute_is_refused_naming_the_op(name):
    op = OPS[name]
    sample = next(c for c in CASES if c.op == name)
    arrays = sample.make(np.random.default_rng(0))
    types = [TensorType(a.shape, a.dtype) for a in arrays]
    with pytest.raises(dl.InvalidArgument, match=name):
        op.prepare(types, {**sample.attrs, "no_such_attribute": 1})


def test_wrong_input_count_names_the_op():
    for name, op in OPS.items():
        sample = next(c for c in CASES if c.op == name)
        arrays = sample.make(np.random.default_rng(0))
        types = [TensorType(a.shape, a.dtype) for a in arrays]
        too_many = types + [types[0]] * (op.max_inputs - len(types) + 1)
        with pytest.raises(dl.InvalidArgument, match=name):
            op.prepare(too_many, dict(sample.attrs))


def test_get_registers_the_library_on_first_use():
    import subprocess
    import sys

    code = ("import devicelayer\nfrom devicelayer.kernels.op import get\nfrom devicelayer.errors import UnsupportedOp\n"
            "assert get('attention').name == 'attention'\n"
            "try:\n    get('no_such_op')\nexcept UnsupportedOp as e:\n    print('refused', e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "refused no op named 'no_such_op'" in done.stdout

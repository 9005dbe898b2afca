"""Property tests of the broadcasting binary ops, where and prelu on every device, and their misuse."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import devicelayer as dl
from devicelayer.kernels.op import OPS, TensorType
from devicelayer.kernels.runner import run
from devicelayer.ops import names  # noqa: F401  (registers the library)
from devicelayer.tensors import tensor
from op_cases import run_and_reference

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
FLOAT_OPS = ["add", "sub", "mul", "div", "pow", "max", "min"]
INT_OPS = ["add", "sub", "mul", "max", "min"]


def check_against_reference(device, name, arrays, attrs=None, rtol=2e-5, atol=2e-5):
    """Run op ``name`` on ``device`` and compare with its NumPy reference in float64 (skips unsupported combos)."""
    both = run_and_reference(device, name, arrays, dict(attrs or {}))
    if both is None:
        return
    got, want, outs = both
    for g, w, t in zip(got, want, outs):
        assert g.shape == t.shape and g.dtype == t.dtype
        w = np.asarray(w)
        if t.dtype.kind in "iub":
            np.testing.assert_array_equal(g, w.astype(t.dtype))
        else:
            scale = float(np.max(np.abs(w[np.isfinite(w)]), initial=0.0))
            np.testing.assert_allclose(g.astype(np.float64), w, rtol=rtol, atol=atol * max(1.0, scale))


def _values(rng, shape, dtype, name=""):
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-1000, 1000, shape).astype(dtype)
    return rng.uniform(-2, 2, shape).astype(dtype)


@SETTINGS
@given(op=st.sampled_from(FLOAT_OPS), shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=6, max_side=5),
       seed=st.integers(0, 2**32 - 1))
def test_float_binary_matches_reference(device, op, shapes, seed):
    rng = np.random.default_rng(seed)
    a_shape, b_shape = shapes.input_shapes
    a = rng.uniform(-2, 2, a_shape).astype(np.float32)
    b = rng.uniform(-2, 2, b_shape).astype(np.float32)
    if op == "div":
        b = np.where(np.abs(b) < 0.25, np.float32(0.25), b).astype(np.float32)
    if op == "pow":
        a = np.where(np.abs(a) < 0.25, np.float32(0.25), a).astype(np.float32)
        if rng.random() < 0.5:
            a = np.abs(a)  # any exponent
        else:
            b = np.round(b).astype(np.float32)  # negative bases need integral exponents
    check_against_reference(device, op, [a, b], rtol=1e-4 if op == "pow" else 2e-5)


@SETTINGS
@given(op=st.sampled_from(INT_OPS), dtype=st.sampled_from(["int32", "int64"]),
       shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=6, max_side=5), seed=st.integers(0, 2**32 - 1))
def test_int_binary_matches_reference(device, op, dtype, shapes, seed):
    if dtype not in device.info.dtypes:
        pytest.skip(f"{device.id} has no {dtype}")
    rng = np.random.default_rng(seed)
    arrays = [_values(rng, s, dtype) for s in shapes.input_shapes]
    check_against_reference(device, op, arrays)


@SETTINGS
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=6, max_side=4),
       cond=st.sampled_from(["bool", "uint8", "int32", "int64"]), values=st.sampled_from(["float32", "int32"]),
       seed=st.integers(0, 2**32 - 1))
def test_where_matches_reference(device, shapes, cond, values, seed):
    rng = np.random.default_rng(seed)
    c_shape, x_shape, y_shape = shapes.input_shapes
    c = (rng.random(c_shape) < 0.5).astype(cond)
    check_against_reference(device, "where", [c, _values(rng, x_shape, values), _values(rng, y_shape, values)])


@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_prelu_matches_reference(device, data, seed):
    x_shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=6, min_side=0, max_side=5), "x")
    keep = data.draw(st.integers(0, len(x_shape)), "slope rank")
    ones = data.draw(st.lists(st.booleans(), min_size=keep, max_size=keep), "slope ones")
    slope_shape = tuple(1 if one else s for one, s in zip(ones, x_shape[len(x_shape) - keep:]))
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, x_shape).astype(np.float32)
    slope = rng.uniform(0, 1, slope_shape).astype(np.float32)
    check_against_reference(device, "prelu", [x, slope])


def test_binary_large_broadcast(device):
    """A 6-D broadcast that does not collapse, past one launch's worth of groups."""
    rng = np.random.default_rng(1)
    a = rng.uniform(-2, 2, (3, 1, 40, 1, 30, 7)).astype(np.float32)
    b = rng.uniform(-2, 2, (1, 50, 1, 20, 1, 7)).astype(np.float32)
    check_against_reference(device, "add", [a, b])


# -- misuse -------------------------------------------------------------------------------------------------
def T(shape, dtype="float32"):
    return TensorType.of(shape, dtype)


MISUSE = [
    ("add", [T((3,)), T((3,), "float16")], {}, "same dtype"),
    ("mul", [T((3,), "int32"), T((3,))], {}, "same dtype"),
    ("sub", [T((3, 4)), T((5,))], {}, "broadcast"),
    ("max", [T((2, 3)), T((3, 2))], {}, "broadcast"),
    ("div", [T((3,), "bool"), T((3,), "bool")], {}, "floating-point or integer"),
    ("pow", [T((3,)), T((3,), "int64")], {}, "exponent"),
    ("add", [T((3,), "bool"), T((3,), "bool")], {}, "integer"),
    ("add", [T((3,)), T((3,))], {"alpha": 2}, "unknown"),
    ("where", [T((3,)), T((3,)), T((3,))], {}, "cond"),
    ("where", [T((3,), "bool"), T((3,)), T((3,), "int32")], {}, "same dtype"),
    ("where", [T((3,), "bool"), T((4,)), T((3,))], {}, "broadcast"),
    ("where", [T((3,), "bool"), T((3,)), T((3,))], {"axis": 0}, "unknown"),
    ("prelu", [T((3,)), T((2, 3))], {}, "broadcast to x"),
    ("prelu", [T((3, 4)), T((3,))], {}, "broadcast"),
    ("prelu", [T((3,), "int32"), T((3,), "int32")], {}, "floating"),
    ("prelu", [T((3,)), T((3,), "float64")], {}, "same dtype"),
]


@pytest.mark.parametrize("name,types,attrs,match", MISUSE, ids=[f"{m[0]}-{i}" for i, m in enumerate(MISUSE)])
def test_misuse_is_refused_naming_the_op(name, types, attrs, match):
    with pytest.raises(dl.InvalidArgument, match=name) as info:
        OPS[name].prepare(types, attrs)
    assert match in str(info.value)


@pytest.mark.parametrize("name", ["add", "where", "prelu"])
def test_wrong_arity(name):
    with pytest.raises(dl.InvalidArgument, match=name):
        OPS[name].prepare([T((3,))], {})


def test_mixed_dtypes_refused_on_a_device(device):
    a = tensor(np.ones(3, np.float32), device)
    b = tensor(np.ones(3, np.int32), device)
    with pytest.raises(dl.InvalidArgument, match="add: .*same dtype"):
        run("add", [a, b])


def test_float32_division_is_rounded_as_ieee(device, rng):
    """Float division rounds to the nearest float on every device (Vulkan's own ``/`` may be 2.5 ulp off), near
    ties too: x / (5 / 255) lands one float step from .5 for several x (DynamicQuantizeLinear's rounding)."""
    n = 1 << 16
    a = (rng.standard_normal(n) * rng.choice([1e-3, 1.0, 1e3], n)).astype(np.float32)
    b = (rng.standard_normal(n) * rng.choice([1e-3, 1.0, 1e3], n)).astype(np.float32)
    a[:6] = [0, 2, -3, -2.5, 1.34, 0.5]
    b[:6] = np.float32(5) / np.float32(255)
    out = tensor(np.full(n, np.nan, np.float32), device)
    run("div", [tensor(a, device), tensor(b, device)], out=[out])
    got = out.numpy()
    want = a / b  # NumPy divides floats as IEEE
    wrong = np.flatnonzero(got != want)
    assert wrong.size == 0, f"{wrong.size} quotients off, first {a[wrong[0]]!r} / {b[wrong[0]]!r}: {got[wrong[0]]!r}"

"""Storage-only dtypes on the host (bfloat16, float8, float4, int4/int2 through ml_dtypes): casts to and from
them against ONNX's reference implementation, bfloat16 arithmetic in float32, refusal on kernel devices; and the
host's vectorised erf against math.erf."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import devicelayer as dl
from devicelayer import dtypes
from devicelayer.kernels.op import TensorType, get
from devicelayer.kernels.runner import run
from devicelayer.kernels.special import erf
from devicelayer.ops import names  # noqa: F401  (registers the library)
from devicelayer.tensors import tensor

onnx = pytest.importorskip("onnx")
pytest.importorskip("ml_dtypes")

from onnx import helper  # noqa: E402
from onnx.reference.ops.op_cast import cast_to  # noqa: E402

#: values every conversion meets: ordinary, tiny, huge, past each float8's range, signed zeros, inf, NaN
SPECIAL = np.array([0.47892547, -0.48033667, 0.7229038, -1.7, 3.0, -9.0, 15.0, 1e6, -1e6, 1e-7, -1e-7, 0.0, -0.0,
                    448.0, 464.0, 500.0, 57344.0, 61440.0, 7e4, 0.124, 0.25, 1.1, np.inf, -np.inf, np.nan],
                   np.float32)
STORAGE = sorted(dtypes.HOST_ONLY | {"bfloat16"})


def _host():
    return dl.device("host")


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8)


def _cast_on_host(x: np.ndarray, to: str, **attrs) -> np.ndarray:
    return run("cast", [tensor(x, _host())], to=to, **attrs)[0].numpy()


def _onnx_cast(x: np.ndarray, to: str, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
    return np.asarray(cast_to(x, helper.np_dtype_to_tensor_dtype(dtypes.dtype(to)), saturate, round_mode))


def test_the_host_stores_every_storage_dtype():
    assert set(STORAGE) <= _host().info.dtypes
    for name in STORAGE:
        assert dtypes.dtype(name).name == name
        assert _host().pool.host_array((2, 3), name).dtype == dtypes.dtype(name)  # memory takes the names


@pytest.mark.parametrize("name", STORAGE)
@pytest.mark.parametrize("source", ["float32", "float16", "float64"])
def test_cast_to_storage_dtype_matches_onnx_reference(name, source):
    with np.errstate(over="ignore"):
        x = SPECIAL.astype(source)  # 1e6 overflows float16
    got = _cast_on_host(x, name)
    assert got.dtype == dtypes.dtype(name)
    np.testing.assert_array_equal(_bits(got), _bits(_onnx_cast(x, name)))


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"])
def test_cast_without_saturation_matches_onnx_reference(name):
    got = _cast_on_host(SPECIAL, name, saturate=0)
    np.testing.assert_array_equal(_bits(got), _bits(_onnx_cast(SPECIAL, name, saturate=False)))


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_to_e8m0_rounds_as_onnx(round_mode, saturate):
    x = np.concatenate([SPECIAL, np.float32([3.4e38, 1.5, 1.75, 2 ** -126, 2 ** -130, 6e-39])])
    got = _cast_on_host(x, "float8_e8m0fnu", saturate=saturate, round_mode=round_mode)
    want = _onnx_cast(x, "float8_e8m0fnu", bool(saturate), round_mode)
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("name", STORAGE)
@pytest.mark.parametrize("target", ["float32", "float16", "int32", "int8", "bool"])
def test_cast_from_storage_dtype_matches_onnx_reference(name, target):
    x = _onnx_cast(SPECIAL[np.isfinite(SPECIAL)], name)
    got = _cast_on_host(x, target)
    want = _onnx_cast(x, target)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_bfloat16_arithmetic_is_float32_rounded_to_bfloat16():
    rng = np.random.default_rng(3)
    bf16 = dtypes.dtype("bfloat16")
    a = rng.uniform(-4, 4, (3, 50)).astype(bf16)
    b = rng.uniform(0.5, 4, (50,)).astype(bf16)
    host = _host()
    for op, fn in [("add", np.add), ("mul", np.multiply), ("div", np.divide), ("max", np.maximum)]:
        got = run(op, [tensor(a, host), tensor(b, host)])[0].numpy()
        assert got.dtype == bf16
        want = fn(a.astype(np.float32), b.astype(np.float32)).astype(bf16)
        np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
    got = run("gelu", [tensor(a, host)])[0].numpy()
    # (against gelu's float32 NumPy form: the host's float32 call may run oneDNN's, whose last bit can differ and
    # round to the other bfloat16 neighbour)
    gelu = get("gelu")
    attrs, _ = gelu.prepare([TensorType.of(a.shape, "float32")], {})
    want = gelu.reference([a.astype(np.float32)], attrs)[0].astype(bf16)
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
    less = run("less", [tensor(a, host), tensor(b, host)])[0].numpy()
    np.testing.assert_array_equal(less, a.astype(np.float32) < b.astype(np.float32))


def test_is_float_knows_the_storage_floats():
    for name in ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn", "float16"):
        assert dtypes.is_float(dtypes.dtype(name)), name
    for name in ("int4", "uint2", "int8", "bool"):
        assert not dtypes.is_float(dtypes.dtype(name)), name
    assert dtypes.is_integer(dtypes.dtype("int4")) and not dtypes.is_integer(np.dtype(bool))


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "int4"])
def test_kernel_devices_refuse_storage_dtypes_with_a_reason(name):
    from devicelayer.kernels.op import OPS, TensorType

    x = TensorType((3,), np.dtype(np.float32))
    attrs, _ = OPS["cast"].prepare([x], {"to": name})
    for device in dl.devices():
        why = OPS["cast"].unsupported([x], attrs, device.info)
        if device.info.kernel_language == "python" or name in device.info.dtypes and name == "bfloat16":
            continue
        assert why is not None and name in why, (device.id, why)


# -- erf ----------------------------------------------------------------------------------------------------------
def test_erf_is_accurate_to_float64_over_a_wide_range():
    pos = np.concatenate([np.linspace(0, 30, 200001), np.logspace(-310, 1.5, 20001), [0.46875, 4.0, 26.543, 5e-324]])
    x = np.concatenate([pos, -pos])
    want = np.array([math.erf(v) for v in x])
    got = erf(x)
    rel = np.abs(got - want) / np.maximum(np.abs(want), np.finfo(np.float64).tiny)
    assert rel.max() < 2e-15, x[np.argmax(rel)]
    assert np.all(np.sign(got) == np.sign(want))


def test_erf_special_values_and_dtypes():
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0], np.float64)
    got = erf(x)
    np.testing.assert_array_equal(got[:2], [1.0, -1.0])
    assert np.isnan(got[2]) and got[3] == 0.0 and np.signbit(got[4])
    for dt in (np.float32, np.float16):
        y = erf(np.linspace(-3, 3, 101).astype(dt))
        assert y.dtype == dt
        want = np.array([math.erf(float(v)) for v in np.linspace(-3, 3, 101).astype(dt)])
        np.testing.assert_allclose(y.astype(np.float64), want, rtol=np.finfo(dt).eps, atol=np.finfo(dt).eps)


REFUSED = [
    ("complex to float32", np.array([1 + 2j]), "float32", "complex128 values cannot become float32"),
    ("complex with zero imaginary part", np.array([1 + 0j]), "float32", "the imaginary part would be lost"),
    ("complex list to int64", [1j, 2], "int64", "complex128 values cannot become int64"),
    ("complex scalar to float64", np.complex64(3j), "float64", "complex64 values cannot become float64"),
    ("int64 beyond int32", np.array([2 ** 40]), "int32", "the int64 value 1099511627776 does not fit int32"),
    ("negative to uint8", np.array([-1, 3]), "uint8", "the int64 value -1 does not fit uint8"),
    ("uint64 beyond int64", np.array([2 ** 63], np.uint64), "int64", "does not fit int64"),
    ("float beyond int8", np.array([200.0]), "int8", "value 200.0 does not fit int8"),
    ("NaN to int32", np.array([np.nan]), "int32", "NaN or infinity"),
    ("infinity to uint16", [float("inf")], "uint16", "NaN or infinity"),
    ("Python int beyond int64", [2 ** 70], "int64", "cannot convert to int64"),
    ("text to float32", ["abc"], "float32", "cannot convert to float32"),
]


@pytest.mark.parametrize("case", REFUSED, ids=[c[0] for c in REFUSED])
def test_host_conversions_that_would_change_values_are_refused(case):
    from devicelayer.casting import to_dtype

    _, x, dtype, says = case
    with pytest.raises(dl.InvalidArgument, match="^where: .*" + re.escape(says)):
        to_dtype(x, dtype, "where")


ACCEPTED = [
    ("float64 rounded to float32", np.array([0.1]), "float32", np.float32(0.1)),
    ("floats truncated into int32", [1.7, -1.7], "int32", np.array([1, -1])),
    ("numbers into bool", [2, 0], "bool", np.array([True, False])),
    ("int64 in range to int8", np.array([-128, 127]), "int8", np.array([-128, 127])),
    ("ints to float16", [1, 2049], "float16", np.array([1, 2048])),
    ("complex to complex64", np.array([1 + 2j]), "complex64", np.array([1 + 2j])),
    ("numeric text to float32", ["1.5"], "float32", np.array([1.5])),
]


@pytest.mark.parametrize("case", ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_host_conversions_numpy_and_onnxruntime_make_are_made(case):
    from devicelayer.casting import to_dtype

    _, x, dtype, want = case
    got = to_dtype(x, dtype, "where")
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, np.asarray(want).astype(dtype))

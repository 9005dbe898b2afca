"""Element dtypes beyond NumPy's own, and the questions every layer asks of a dtype.

NumPy knows bool, the sized integers and float16/32/64.  ``ml_dtypes`` (a
dependency of ``onnx``) adds bfloat16, the float8 family (e4m3fn, e4m3fnuz,
e5m2, e5m2fnuz, e8m0fnu), float4 e2m1, int4/uint4 and int2/uint2 as NumPy
dtypes of one or two bytes per element.  Their ``kind`` is not "f"/"i"/"u"
(mostly "V"), so code asking "is this a float?" asks ``is_float`` here.

bfloat16 is a storage type whose arithmetic is done in float32; the others
are storage-only, held on the host and converted there (``Cast``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

try:
    import ml_dtypes
except ImportError:  # pragma: no cover - ml_dtypes comes with onnx; without it these dtypes do not exist
    ml_dtypes = None

#: ml_dtypes floating-point dtypes, by name
_FLOAT_NAMES = ("bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                "float8_e8m0fnu", "float4_e2m1fn")
#: ml_dtypes integer dtypes narrower than a byte (stored one per byte), by name
_INT_NAMES = ("int4", "uint4", "int2", "uint2")

#: every ml_dtypes dtype this installation has, by name
EXTRA: dict[str, np.dtype] = {
    name: np.dtype(getattr(ml_dtypes, name))
    for name in _FLOAT_NAMES + _INT_NAMES if ml_dtypes is not None and hasattr(ml_dtypes, name)}
#: the extra floating-point dtypes
EXTRA_FLOATS = frozenset(n for n in _FLOAT_NAMES if n in EXTRA)
#: the extra integer dtypes
EXTRA_INTS = frozenset(n for n in _INT_NAMES if n in EXTRA)
#: dtypes that only the host stores: no kernel language has a type for them
HOST_ONLY = frozenset(n for n in EXTRA if n != "bfloat16")


def dtype(x: Any) -> np.dtype:
    """``np.dtype(x)``, also for the names of the extra dtypes ("bfloat16", "float8_e4m3fn", "int4", ...)."""
    if isinstance(x, str) and x in EXTRA:
        return EXTRA[x]
    return np.dtype(x)


def is_float(dt: Any) -> bool:
    """Whether ``dt`` is a floating-point dtype (NumPy's or an extra one such as bfloat16 or float8)."""
    dt = np.dtype(dt)
    return dt.kind == "f" or dt.name in EXTRA_FLOATS


def is_integer(dt: Any) -> bool:
    """Whether ``dt`` is an integer dtype (NumPy's or int4/uint4/int2/uint2); bool is not."""
    dt = np.dtype(dt)
    return dt.kind in "iu" or dt.name in EXTRA_INTS


def is_signed(dt: Any) -> bool:
    """Whether ``dt`` holds negative numbers (signed integers and every float)."""
    dt = np.dtype(dt)
    return dt.kind in "if" or dt.name in EXTRA_FLOATS or dt.name in ("int4", "int2")


def is_number(dt: Any) -> bool:
    """Whether ``dt`` is a number or bool dtype (what tensors may hold)."""
    dt = np.dtype(dt)
    return dt.kind in "biuf" or dt.name in EXTRA


def finfo(dt: Any) -> Any:
    """``np.finfo`` of a floating-point dtype, extra ones included."""
    dt = np.dtype(dt)
    return ml_dtypes.finfo(dt) if dt.name in EXTRA_FLOATS else np.finfo(dt)


def iinfo(dt: Any) -> Any:
    """``np.iinfo`` of an integer dtype, int4/uint4/int2/uint2 included."""
    dt = np.dtype(dt)
    return ml_dtypes.iinfo(dt) if dt.name in EXTRA_INTS else np.iinfo(dt)


__all__ = ["EXTRA", "EXTRA_FLOATS", "EXTRA_INTS", "HOST_ONLY", "dtype", "is_float", "is_integer", "is_signed",
           "is_number", "finfo", "iinfo"]


def computes_as_float(dt: Any) -> bool:
    """Whether ``dt`` is a float the kernels compute on: NumPy's floats, and bfloat16 (in float32); not the
    storage-only float8 and float4 types."""
    dt = np.dtype(dt)
    return dt.kind == "f" or dt.name == "bfloat16"


def arithmetic(dt: Any) -> np.dtype:
    """The dtype the host computes ``dt`` in: float32 for the 16-bit floats (float16, bfloat16), ``dt`` itself
    otherwise."""
    dt = np.dtype(dt)
    return np.dtype(np.float32) if dt.itemsize == 2 and computes_as_float(dt) else dt


def eps(dt: Any) -> float:
    """The machine epsilon of a floating-point dtype (NumPy's or an extra one such as bfloat16)."""
    dt = np.dtype(dt)
    if dt.name in EXTRA_FLOATS:
        return float(ml_dtypes.finfo(dt).eps)
    return float(np.finfo(dt).eps)

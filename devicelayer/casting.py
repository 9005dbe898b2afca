"""Host data converted to the dtype a tensor, a plan input or a model input holds, refusing conversions that
would change values silently.

Refused (``InvalidArgument`` naming the input and both dtypes): complex numbers into a real dtype (the
imaginary part would be lost), integers outside an integer dtype's range (they would wrap), NaN or infinity
into an integer dtype.  Accepted, as NumPy and onnxruntime accept them: rounding to a narrower float,
truncating floats toward zero into integers in range, any number into bool.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from . import dtypes
from .errors import InvalidArgument


def to_dtype(x: Any, dtype: Any, where: str) -> np.ndarray:
    """``x`` (an array, a NumPy or Python scalar, nested lists) as a NumPy array of ``dtype`` (``x`` itself when it
    already is one); InvalidArgument, beginning with ``where``, when the conversion would lose more than
    rounding."""
    dt = np.dtype(dtype)
    if isinstance(x, np.ndarray) and x.dtype == dt:
        return x
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", np.exceptions.ComplexWarning)
            src = x if isinstance(x, np.ndarray) else np.asarray(x)
            if src.dtype == dt:
                return src
            if src.dtype.hasobject:  # Python ints beyond int64, mixed objects: NumPy converts (or refuses) each
                return np.asarray(x, dtype=dt)
            _check_values(src, dt, where)
            with np.errstate(all="ignore"):
                return src.astype(dt)
    except np.exceptions.ComplexWarning:
        raise InvalidArgument(_complex(where, dt)) from None
    except (TypeError, ValueError, OverflowError) as exc:
        if isinstance(exc, InvalidArgument):
            raise
        raise InvalidArgument(f"{where}: cannot convert to {dt}: {exc}") from None


def _complex(where: str, dt: np.dtype, src: np.dtype | None = None) -> str:
    given = f"{src} values" if src is not None else "complex values"
    return f"{where}: {given} cannot become {dt} (the imaginary part would be lost)"


def _check_values(src: np.ndarray, dt: np.dtype, where: str) -> None:
    """InvalidArgument when converting ``src`` to ``dt`` would lose more than rounding."""
    if src.dtype.kind == "c" and dt.kind != "c":
        raise InvalidArgument(_complex(where, dt, src.dtype))
    if not dtypes.is_integer(dt) or src.size == 0:
        return
    if dtypes.is_float(src.dtype):
        wide = src.astype(np.float64)
        if not np.isfinite(wide).all():
            raise InvalidArgument(f"{where}: {src.dtype} values include NaN or infinity, which {dt} cannot hold")
    elif dtypes.is_integer(src.dtype):
        if np.can_cast(src.dtype, dt, "safe"):
            return
        wide = src if src.dtype.kind in "iu" else src.astype(np.int64)
    else:
        return
    info = dtypes.iinfo(dt)
    lo, hi = wide.min(), wide.max()
    bad = hi if hi > int(info.max) else lo if lo < int(info.min) else None
    if bad is not None:
        raise InvalidArgument(f"{where}: the {src.dtype} value {bad} does not fit {dt} ({info.min} to {info.max})")

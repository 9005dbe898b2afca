"""Kernel signatures: what each argument of a kernel is, and checking launch arguments against it."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from .errors import InvalidArgument
from .info import DTYPE_NAMES
from .memory import Buffer

# C-like type names of the four kernel languages, mapped to NumPy dtypes.
_C_TYPES = {
    "bool": "bool", "char": "int8", "signed char": "int8", "uchar": "uint8", "unsigned char": "uint8",
    "short": "int16", "ushort": "uint16", "unsigned short": "uint16",
    "int": "int32", "uint": "uint32", "unsigned int": "uint32", "unsigned": "uint32",
    "long": "int64", "ulong": "uint64", "unsigned long": "uint64",
    "long long": "int64", "unsigned long long": "uint64", "size_t": "uint64", "ptrdiff_t": "int64",
    "half": "float16", "__half": "float16", "float": "float32", "double": "float64",
    "__nv_bfloat16": "bfloat16",
    "int8_t": "int8", "uint8_t": "uint8", "int16_t": "int16", "uint16_t": "uint16",
    "int32_t": "int32", "uint32_t": "uint32", "int64_t": "int64", "uint64_t": "uint64",
    # the kernel dialect's sized names (typedefs of the rendered kernels)
    "i16": "int16", "u16": "uint16", "i64": "int64", "u64": "uint64", "f16": "float16", "f64": "float64",
    "bf16": "bfloat16",
}
#: names a kernel parameter's type may have: C names above, and devicelayer's dtype names (``float32*``)
_NAMED = frozenset(DTYPE_NAMES)
_QUALIFIERS = {"const", "volatile", "restrict", "__restrict__", "__restrict", "__global", "global",
               "__constant", "constant", "__local", "local", "__private", "private", "struct"}


@dataclass(frozen=True)
class Arg:
    """One kernel argument: a device ``buffer`` (``dtype`` = element type, or None for bytes) or a ``scalar``."""

    name: str
    kind: str  # "buffer" or "scalar" (or "any" when the backend cannot tell)
    dtype: np.dtype | None = None


Signature = tuple[Arg, ...]


def dtype_of(name: str) -> np.dtype | None:
    """The NumPy dtype for a type name (``float``, ``float32``, ``uint``...); None when it has none (``void``,
    bfloat16, a typedef devicelayer does not know: such a pointer takes a buffer of any dtype)."""
    name = " ".join(name.split())
    mapped = _C_TYPES.get(name, name)
    if mapped == "bfloat16" or mapped not in _NAMED:
        return None
    return np.dtype(mapped)


def parse_arg(text: str) -> Arg:
    """Parse one C-style parameter (``"const float* a"``, ``"int n"``, ``"float32* out"``)."""
    text = text.strip()
    m = re.match(r"^(.*?)([A-Za-z_]\w*)\s*(\[\s*\])?$", text)
    if not m or not m.group(1).strip():
        raise InvalidArgument(f"cannot parse kernel parameter {text!r}")
    type_text, name, brackets = m.group(1), m.group(2), m.group(3)
    pointer = "*" in type_text or bool(brackets)
    words = [w for w in type_text.replace("*", " ").split() if w not in _QUALIFIERS]
    dtype = dtype_of(" ".join(words)) if words else None
    if pointer:
        return Arg(name, "buffer", dtype)
    if dtype is None:
        raise InvalidArgument(f"kernel parameter {text!r} has a type devicelayer cannot pass")
    return Arg(name, "scalar", dtype)


def parse_signature(text: str | Iterable[str]) -> Signature:
    """Parse a parameter list, ``"const float* a, float* b, int n"``, or a sequence of parameters."""
    try:
        items = text.split(",") if isinstance(text, str) else list(text)
    except TypeError:
        raise InvalidArgument(f"a signature is a parameter list or a sequence of parameters, "
                              f"got {type(text).__name__}") from None
    parts = [p for p in items if str(p).strip()]
    for p in parts:
        if not isinstance(p, (str, Arg)):
            raise InvalidArgument(f"a signature holds parameters such as 'int n' or Arg objects, got {p!r}")
    return tuple(parse_arg(p) if isinstance(p, str) else p for p in parts)


def c_signature(source: str, entry: str) -> Signature | None:
    """Find ``entry(...)``'s parameter list in C-like source; None when it is not found."""
    m = re.search(r"\b" + re.escape(entry) + r"\s*\(([^)]*)\)\s*\{", source)
    if not m:
        return None
    params = m.group(1).strip()
    if params in ("", "void"):
        return ()
    try:
        return parse_signature(params)
    except InvalidArgument:
        return None


def buffer_fits(param: np.dtype | None, held: np.dtype | None) -> bool:
    """Whether a buffer holding ``held`` may go to a pointer parameter of element type ``param``: the same dtype,
    or either side untyped (None); a bool is a byte of 0 or 1, so bool and 8-bit integers go either way."""
    if param is None or held is None or param == held:
        return True
    return param.itemsize == held.itemsize == 1 and "b" in (param.kind, held.kind)


def check_buffer(value: Buffer, arg: Arg, where: str) -> None:
    """InvalidArgument naming the parameter, its type and the buffer's dtype when they disagree (``buffer_fits``)."""
    if not buffer_fits(arg.dtype, value.dtype):
        raise InvalidArgument(f"{where}: argument {arg.name!r} ({arg.dtype}*) got a buffer that holds {value.dtype}; "
                              f"pass a buffer of {arg.dtype}, or a view of this one as {arg.dtype} to reinterpret it")


def _float_max(dtype: np.dtype) -> float:
    """The largest finite value of a float dtype."""
    return float(np.finfo(dtype).max)


def _check_float_range(value: int | float, dtype: np.dtype, arg: Arg, where: str) -> None:
    """InvalidArgument for a finite number beyond what a float ``dtype`` holds (it would become infinity)."""
    try:
        beyond = math.isfinite(float(value)) and abs(float(value)) > _float_max(dtype)
    except OverflowError:  # an int beyond float64
        beyond = True
    if beyond:
        raise InvalidArgument(f"{where}: argument {arg.name!r} ({dtype}) cannot hold {value!r} (it would become "
                              f"infinity)")


def check_scalar(value: Any, arg: Arg, where: str) -> np.generic:
    """Convert a launch scalar to ``arg.dtype``, refusing lossy or ill-typed values."""
    if isinstance(value, Buffer):
        raise InvalidArgument(f"{where}: argument {arg.name!r} is a scalar, got a buffer")
    dtype = arg.dtype
    if isinstance(value, (bool, np.bool_)) and dtype is not None and dtype.kind != "b":
        raise InvalidArgument(f"{where}: argument {arg.name!r} expects {dtype}, got a bool")
    if dtype is None:
        if isinstance(value, np.generic):
            return value
        if isinstance(value, (int, float)):
            return np.array(value)[()]
        raise InvalidArgument(f"{where}: argument {arg.name!r} must be a scalar, got {type(value).__name__}")
    if isinstance(value, np.generic):
        if not np.can_cast(value.dtype, dtype, "same_kind"):
            raise InvalidArgument(f"{where}: argument {arg.name!r} expects {dtype}, got {value.dtype}")
        value = value.item()
    if isinstance(value, (bool, np.bool_)) and dtype.kind == "b":
        return np.bool_(value)
    if isinstance(value, int):
        if dtype.kind in "iu":
            lo, hi = _int_range(dtype)
            if not lo <= value <= hi:
                raise InvalidArgument(f"{where}: argument {arg.name!r} ({dtype}) cannot hold {value}")
        elif dtype.kind != "f":
            raise InvalidArgument(f"{where}: argument {arg.name!r} expects {dtype}, got an int")
        else:
            _check_float_range(value, dtype, arg, where)
        return dtype.type(value)
    if isinstance(value, float):
        if dtype.kind != "f":
            raise InvalidArgument(f"{where}: argument {arg.name!r} expects {dtype}, got a float")
        _check_float_range(value, dtype, arg, where)
        return dtype.type(value)
    raise InvalidArgument(f"{where}: argument {arg.name!r} expects {dtype}, got {type(value).__name__}")


_RANGES: dict[np.dtype, tuple[int, int]] = {}


def _int_range(dtype: np.dtype) -> tuple[int, int]:
    r = _RANGES.get(dtype)
    if r is None:
        info = np.iinfo(dtype)
        r = _RANGES[dtype] = (int(info.min), int(info.max))
    return r


def check_size(size: Any, what: str, limit: Sequence[int] | None = None) -> tuple[int, ...]:
    """Normalise a 1-3 dimensional launch size, refusing non-positive or oversized extents."""
    if type(size) is int and size > 0 and (limit is None or size <= limit[0]):
        return (size,)
    if type(size) is tuple and len(size) == 1 and type(size[0]) is int and size[0] > 0 \
            and (limit is None or size[0] <= limit[0]):
        return size
    dims = (size,) if isinstance(size, (int, np.integer)) else tuple(size) if isinstance(size, (tuple, list)) else None
    if not dims or len(dims) > 3 or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in dims):
        raise InvalidArgument(f"{what} must be a positive int or a tuple of 1 to 3 positive ints, got {size!r}")
    dims = tuple(int(d) for d in dims)
    if any(d <= 0 for d in dims):
        raise InvalidArgument(f"{what} must be positive in every dimension, got {dims}")
    if limit is not None:
        for axis, (d, cap) in enumerate(zip(dims, limit)):
            if d > cap:
                raise InvalidArgument(f"{what} {dims} exceeds the device's limit {tuple(limit)} in dimension {axis}")
    return dims

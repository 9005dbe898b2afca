"""Element-type facts the elementwise op families share: which dtypes have kernels, how an op names the kind
of its operands, how the host computes on storage-only floats, and the integer types of the kernel dialect."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...dtypes import EXTRA_FLOATS, is_float, is_integer

#: dtypes the elementwise kernels take (bool as a byte buffer of 0 and 1)
KERNEL_DTYPES = frozenset({"bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                           "float16", "float32", "float64"})
#: what the kind letters of ``kind_of`` stand for, in messages
KIND_NAMES = {"f": "floating-point", "i": "integer", "b": "bool"}

#: dialect integer types: bits, signedness
INT_BITS = {"char": 8, "uchar": 8, "i16": 16, "u16": 16, "int": 32, "uint": 32, "i64": 64, "u64": 64}
SIGNED_TYPES = frozenset({"char", "i16", "int", "i64"})


def kind_of(dt: Any) -> str:
    """"f" for floating-point dtypes (bfloat16 and float8 included), "i" for integers, "b" for bool, "?" else."""
    dt = np.dtype(dt)
    if is_float(dt):
        return "f"
    if is_integer(dt):
        return "i"
    return "b" if dt.kind == "b" else "?"


def describe_kinds(kinds: str) -> str:
    """'floating-point or integer' for "fi"."""
    return " or ".join(KIND_NAMES[k] for k in kinds)


def computable(x: np.ndarray) -> np.ndarray:
    """``x`` as the host computes on it: storage-only floats (bfloat16, float8) widened to float32, others as
    they are."""
    return x.astype(np.float32) if x.dtype.name in EXTRA_FLOATS else x


def wide(elem: str) -> str:
    """The 32- or 64-bit dialect integer type of the same signedness that integer arithmetic on ``elem`` uses."""
    if INT_BITS[elem] == 64:
        return elem
    return "int" if elem in SIGNED_TYPES else "uint"


def wide_unsigned(elem: str) -> str:
    """The unsigned 32- or 64-bit dialect type holding ``elem``'s bit pattern (wrap-around arithmetic)."""
    return "u64" if INT_BITS[elem] == 64 else "uint"


def scalar_type(elem: str) -> str:
    """The dialect type of a float scalar argument of a kernel on ``elem`` (double for f64, else float)."""
    return "f64" if elem == "f64" else "float"

"""Index checks shared by the gather and scatter ops, in NumPy and in the kernel dialect.

An index into an axis of size ``dim`` lies in ``[-dim, dim)``; a negative one counts
from the end.  Anything else is an InvalidArgument naming the op and the index: the
NumPy implementations raise it, the device kernels set the plan's ``Flag`` (see
``kernels.op.Flag``) and go on with index 0 in its place (or skip the write).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import InvalidArgument
from ..op import Op, raise_flag

#: NumPy dtypes an index tensor may have, and their dialect types
INDEX_TYPES = {"int32": "int", "int64": "i64"}


def index_dtype(op: Op, dtype: Any, what: str = "indices") -> str:
    """The dialect type of an index tensor of ``dtype``; InvalidArgument naming the op unless int32 or int64."""
    name = np.dtype(dtype).name
    if name not in INDEX_TYPES:
        raise op.error(f"{what} must be int32 or int64, got {name}")
    return INDEX_TYPES[name]


def out_of_range(op: Op, dim: int, where: str) -> str:
    """The message of a bad index into ``where`` (an axis of size ``dim``), naming the op; ``{value}`` stands for
    the index (a ``Flag`` message)."""
    return f"{op.name}: index {{value}} is out of range [{-dim}, {dim}) of {where}"


def bad_value(message: str, value: Any) -> InvalidArgument:
    """The InvalidArgument of a ``Flag`` message (``{value}`` in it) for the bad ``value``."""
    return InvalidArgument(message.format(value=int(value)))


def normalized(op: Op, idx: np.ndarray, dim: int, where: str) -> np.ndarray:
    """``idx`` as int64 with negative entries counted from the end of ``where`` (size ``dim``); InvalidArgument
    naming the op and the first bad index otherwise."""
    idx = np.asarray(idx).astype(np.int64, copy=False)
    if not idx.size:
        return idx
    bad = (idx < -dim) | (idx >= dim)
    if bad.any():
        raise bad_value(out_of_range(op, dim, where), idx[bad].flat[0])
    return np.where(idx < 0, idx + dim, idx)


def checked_index(name: str, src: str, it: str, dim: str, ftype: str, indent: str = "        ") -> str:
    """Dialect code declaring int ``name``: the index ``src`` (of dialect type ``it``) into an axis of ``dim``
    elements, negative ones counted from the end; a bad one sets the flag (type ``ftype``), ``name`` becomes 0 and
    bool ``name_ok`` false."""
    i = indent
    return (f"{i}{it} {name}_raw = {src};\n"
            f"{i}{it} {name}_v = {name}_raw < CAST({it}, 0) ? {name}_raw + CAST({it}, {dim}) : {name}_raw;\n"
            f"{i}bool {name}_ok = {name}_v >= CAST({it}, 0) && {name}_v < CAST({it}, {dim});\n"
            f"{i}if (!{name}_ok) {raise_flag(f'{name}_raw', ftype)}\n"
            f"{i}int {name} = {name}_ok ? CAST(int, {name}_v) : 0;\n")

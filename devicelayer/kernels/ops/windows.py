"""Sliding windows for the NumPy references of conv and pooling: padding, strided window views, and the
contiguous runs of stride-1 windows."""

from __future__ import annotations

from typing import Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided


def padded(x: np.ndarray, begins: Sequence[int], ends: Sequence[int], value: float = 0.0) -> np.ndarray:
    """``x`` (N, C, spatial...) with ``value`` added around its spatial dims (``x`` itself when nothing is added)."""
    if not any(begins) and not any(ends):
        return x
    shape = x.shape[:2] + tuple(n + b + e for n, b, e in zip(x.shape[2:], begins, ends))
    xp = np.empty(shape, x.dtype)
    inner = [slice(b, b + n) for b, n in zip(begins, x.shape[2:])]
    xp[(Ellipsis, *inner)] = x
    for i, (b, e) in enumerate(zip(begins, ends)):  # the border slabs only (each element written once)
        lead = (slice(None), slice(None), *inner[:i])
        if b:
            xp[lead + (slice(0, b),)] = value
        if e:
            xp[lead + (slice(shape[2 + i] - e, None),)] = value
    return xp


def windows(x: np.ndarray, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
            out: Sequence[int]) -> np.ndarray:
    """A read-only view (N, C, *kernel, *out) of ``x`` (N, C, spatial...): element ``[n, c, *k, *o]`` is
    ``x[n, c, *(o * strides + k * dilations)]``; every such index must lie inside ``x`` (no copy)."""
    st, nd = x.strides, len(kernel)
    steps = st[:2] + tuple(st[2 + i] * dilations[i] for i in range(nd)) + tuple(st[2 + i] * strides[i]
                                                                                for i in range(nd))
    return as_strided(x, x.shape[:2] + tuple(kernel) + tuple(out), steps, writeable=False)


def runs(xp: np.ndarray, k: Sequence[int], d: Sequence[int], out: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """For a stride-1 window op over ``xp`` (N, C, spatial..., C-ordered), every kernel position's windows
    form one contiguous run of the flattened image: a view (N, C, *k, L) of those runs, and an array
    (out[0], out[1], out[2] * row length) to compute into, whose whole padded rows ``rows`` then trims to
    ``out`` (the columns past the output are never read)."""
    item = xp.itemsize
    pst = [st // item for st in xp.strides[2:]]  # element strides of the spatial dims
    length = sum((o - 1) * ps for o, ps in zip(out[2:], pst)) + 1
    view = as_strided(xp, xp.shape[:2] + tuple(k) + (length,),
                      xp.strides[:2] + tuple(di * ps * item for di, ps in zip(d, pst)) + (item,), writeable=False)
    return view, np.empty((out[0], out[1], out[2] * pst[0]), xp.dtype)


def as_rows(full: np.ndarray, xp: np.ndarray, out: Sequence[int]) -> np.ndarray:
    """The output (N, C', *out) inside ``full`` (from ``runs``, or a slice of its first two axes): a view."""
    steps = tuple(st // xp.itemsize * full.itemsize for st in xp.strides[2:])
    return as_strided(full, tuple(out), full.strides[:2] + steps)


def rows(full: np.ndarray, xp: np.ndarray, out: Sequence[int]) -> np.ndarray:
    """The output (N, C', *out) inside ``full`` (from ``runs``) as a contiguous array."""
    return np.ascontiguousarray(as_rows(full, xp, out))

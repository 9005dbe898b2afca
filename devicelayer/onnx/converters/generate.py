"""Tensors made from parameters: Range, ConstantOfShape, EyeLike, Trilu, OneHot, when their inputs are not all
constants (constants are folded at load time)."""

from __future__ import annotations

import numpy as np

from ...errors import InvalidArgument
from ..loader import np_dtype
from .base import converter, ints, reshape


def _value(ctx, i: int, what: str) -> np.ndarray:
    """Parameter input ``i``: one value (a scalar or a one-element tensor)."""
    x = np.asarray(ctx.need_const(i, what))
    if x.size != 1:
        raise InvalidArgument(f"{what} must be one value, got shape {x.shape}")
    return x.reshape(())


@converter("Range")
def _range(ctx, attrs):
    start, limit, delta = _value(ctx, 0, "start"), _value(ctx, 1, "limit"), _value(ctx, 2, "delta")
    if delta == 0:
        raise InvalidArgument("Range: delta must not be 0")
    if start.dtype.kind in "iu":
        n = -(-(int(limit) - int(start)) // int(delta))
    else:
        n = int(np.ceil((float(limit) - float(start)) / float(delta)))
    return [ctx.op("range", [ctx.raw(0), ctx.raw(2)], n=max(n, 0))]


@converter("ConstantOfShape")
def _constant_of_shape(ctx, attrs):
    shape = ints(ctx.need_const(0, "the shape"))
    value = attrs.get("value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)[:1]
    return [ctx.op("fill", [value], shape=tuple(shape))]


@converter("EyeLike")
def _eye_like(ctx, attrs):
    kw = {"k": int(attrs.get("k", 0))}
    if attrs.get("dtype") is not None:
        kw["dtype"] = np_dtype(int(attrs["dtype"]))
    return [ctx.op("eye_like", [ctx.raw(0)], **kw)]


@converter("Trilu")
def _trilu(ctx, attrs):
    k = ctx.need_const(1, "k")
    return [ctx.op("trilu", [ctx.raw(0)], upper=bool(attrs.get("upper", 1)), k=0 if k is None else ints(k)[0])]


@converter("OneHot")
def _one_hot(ctx, attrs):
    depth = np.asarray(ctx.need_const(1, "depth")).reshape(-1)
    if depth.size != 1:
        raise InvalidArgument(f"OneHot: depth must be one value, got {depth.size}")
    values = ctx.raw(2)
    values = reshape(ctx, values, (int(np.prod(values.shape)),), "values")
    return [ctx.op("one_hot", [ctx.raw(0), values], depth=int(depth[0]), axis=int(attrs.get("axis", -1)))]

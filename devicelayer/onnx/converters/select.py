"""Selection and scans: ArgMax, ArgMin, TopK, Hardmax (arg_max then one_hot), CumSum, CumProd."""

from __future__ import annotations

import math

import numpy as np

from ...errors import InvalidArgument
from .base import converter, ints, reshape


def _one(ctx, i: int, what: str) -> int:
    """Parameter input ``i``, one integer (a scalar or a one-element tensor)."""
    value = ints(ctx.need_const(i, what))
    if len(value) != 1:
        raise InvalidArgument(f"{what} must be one value, got {len(value)}")
    return value[0]


@converter("ArgMax", "ArgMin")
def _arg(ctx, attrs):
    op = "arg_max" if ctx.node.op_type == "ArgMax" else "arg_min"
    return [ctx.op(op, [ctx.raw(0)], axis=int(attrs.get("axis", 0)), keepdims=bool(attrs.get("keepdims", 1)),
                   select_last_index=bool(attrs.get("select_last_index", 0)))]


@converter("TopK")
def _top_k(ctx, attrs):
    k = int(attrs["k"]) if ctx.opset < 10 else _one(ctx, 1, "k")
    return ctx.add("top_k", [ctx.raw(0)], k=k, axis=int(attrs.get("axis", -1)),
                   largest=bool(attrs.get("largest", 1)), sorted=bool(attrs.get("sorted", 1)))


@converter("Hardmax")
def _hardmax(ctx, attrs):
    x = ctx.raw(0)
    rank = len(x.shape)
    if ctx.opset < 13:  # the input seen as 2-D: rows of the dims before axis, the rest one line
        axis = int(attrs.get("axis", 1))
        axis = axis + rank if axis < 0 else axis
        flat = reshape(ctx, x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])), "rows")
        return [reshape(ctx, _hardmax_along(ctx, flat, 1), x.shape, "")]
    axis = int(attrs.get("axis", -1))
    return [_hardmax_along(ctx, x, axis + rank if axis < 0 else axis)]


def _hardmax_along(ctx, x, axis: int):
    """1 at the first largest element along ``axis``, 0 elsewhere."""
    if not x.shape[axis]:
        return x
    top = ctx.op("arg_max", [x], "arg_max", axis=axis, keepdims=False)
    return ctx.op("one_hot", [top, np.array([0, 1], x.dtype)], "one_hot", depth=x.shape[axis], axis=axis)


@converter("CumSum", "CumProd")
def _scan(ctx, attrs):
    op = "cumsum" if ctx.node.op_type == "CumSum" else "cumprod"
    return [ctx.op(op, [ctx.raw(0)], axis=_one(ctx, 1, "axis"), exclusive=bool(attrs.get("exclusive", 0)),
                   reverse=bool(attrs.get("reverse", 0)))]

"""The Reduce* ops."""

from __future__ import annotations

import numpy as np

from .base import cast, converter, ints


_REDUCE = {"ReduceSum": ("sum", 13), "ReduceMean": ("mean", 18), "ReduceMax": ("reduce_max", 18),
           "ReduceMin": ("reduce_min", 18)}


@converter(*_REDUCE)
def _reduce(ctx, attrs):
    op, since = _REDUCE[ctx.node.op_type]
    x = ctx.raw(0)
    if ctx.opset >= since:
        axes = ctx.need_const(1, "axes")
        axes = None if axes is None else ints(axes)
    else:
        axes = attrs.get("axes")
    if not axes:
        if attrs.get("noop_with_empty_axes", 0):
            return [x]
        axes = None
    keep = bool(attrs.get("keepdims", 1))
    if x.dtype.kind != "f":  # the reductions are float kernels: go through float32 and back
        y = ctx.op(op, [cast(ctx, x, np.float32, "to_float")], "float", axes=axes, keepdims=keep)
        return [cast(ctx, y, x.dtype, "")]
    return [ctx.op(op, [x], axes=axes, keepdims=keep)]

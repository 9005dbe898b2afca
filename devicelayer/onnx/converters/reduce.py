"""The Reduce* ops: axes as an attribute (older opsets) or as input 1 (ReduceSum from opset 13, the others
from 18), keepdims, noop_with_empty_axes."""

from __future__ import annotations

import numpy as np

from .base import converter, ints, reshape

#: ONNX op -> (library op, first opset taking the axes as an input)
_REDUCE = {"ReduceSum": ("sum", 13), "ReduceMean": ("mean", 18), "ReduceMax": ("reduce_max", 18),
           "ReduceMin": ("reduce_min", 18), "ReduceProd": ("reduce_prod", 18), "ReduceL1": ("reduce_l1", 18),
           "ReduceL2": ("reduce_l2", 18), "ReduceSumSquare": ("reduce_sum_square", 18),
           "ReduceLogSum": ("reduce_log_sum", 18), "ReduceLogSumExp": ("reduce_log_sum_exp", 18)}

#: reductions whose value over one element is that element
_ELEMENT_IS_RESULT = {"sum", "mean", "reduce_max", "reduce_min", "reduce_prod"}


@converter(*_REDUCE)
def _reduce(ctx, attrs):
    op, since = _REDUCE[ctx.node.op_type]
    x = ctx.raw(0)
    if ctx.opset >= since:
        axes = ctx.need_const(1, "axes")
        axes = None if axes is None else ints(axes)
    else:
        axes = attrs.get("axes")
        axes = None if axes is None else ints(axes)
    if not axes:
        if attrs.get("noop_with_empty_axes", 0):  # each element on its own: |x| for ReduceL1, x² for ...
            return [x] if op in _ELEMENT_IS_RESULT else [ctx.op(op, [x], axes=())]
        axes = None
    reduced = range(len(x.shape)) if axes is None else axes
    if op == "mean" and any(x.shape[a] == 0 for a in reduced if -len(x.shape) <= a < len(x.shape)):
        op = "sum"  # onnxruntime's mean of nothing is 0 (NumPy's, which the library op follows, is NaN)
    keepdims = bool(attrs.get("keepdims", 1))
    if op == "mean" and _spatial(x, axes):  # (a CNN's pooling head: the devices' pooling reads their layouts)
        y = ctx.op("global_average_pool", [x])
        return [y if keepdims else reshape(ctx, y, x.shape[:2])]
    return [ctx.op(op, [x], axes=axes, keepdims=keepdims)]


def _spatial(x, axes) -> bool:
    """Whether ``axes`` are every dimension after the first two of a non-constant float32 (N, C, spatial...)
    tensor with no empty one: a mean over them is a global average pool (other dtypes stay means: not every
    device pools them)."""
    rank = len(x.shape)
    if isinstance(x, np.ndarray) or axes is None or rank < 3 or np.dtype(x.dtype) != np.float32:
        return False
    if any(not -rank <= a < rank for a in axes):
        return False
    return sorted({a % rank for a in axes}) == list(range(2, rank)) and len(axes) == rank - 2 and all(x.shape[2:])

"""BatchNormalization, LRN, Softmax and LogSoftmax, LayerNormalization."""

from __future__ import annotations


import numpy as np

from ...errors import UnsupportedOp
from .base import converter, pick, reshape


# -- normalization -------------------------------------------------------------------------------------------------
@converter("BatchNormalization")
def _batch_norm(ctx, attrs):
    if ctx.opset < 9 and attrs.get("spatial", 1) == 0:
        raise UnsupportedOp("BatchNormalization with spatial=0")
    if attrs.get("training_mode", 0):
        raise UnsupportedOp("BatchNormalization in training mode (inference only)")
    y = ctx.op("batch_normalization", ctx.values()[:5], **pick(attrs, "epsilon"))
    return [y] + [None] * 4


@converter("LRN")
def _lrn(ctx, attrs):
    return [ctx.op("lrn", [ctx.raw(0)], **pick(attrs, "size", "alpha", "beta", "bias"))]


@converter("Softmax", "LogSoftmax")
def _softmax(ctx, attrs):
    op = "softmax" if ctx.node.op_type == "Softmax" else "log_softmax"
    x = ctx.raw(0)
    rank = len(x.shape)
    if ctx.opset >= 13:
        return [ctx.op(op, [x], axis=int(attrs.get("axis", -1)))]
    axis = int(attrs.get("axis", 1))
    axis = axis + rank if axis < 0 else axis
    if axis == rank - 1 or rank <= 1:
        return [ctx.op(op, [x], axis=-1)]
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    flat = reshape(ctx, x, (rows, int(np.prod(x.shape[axis:], dtype=np.int64))), "coerce2d")
    y = ctx.op(op, [flat], "2d", axis=-1)
    return [reshape(ctx, y, x.shape, "")]


@converter("LayerNormalization")
def _layer_norm(ctx, attrs):
    y = ctx.op("layer_normalization", ctx.values()[:3], **pick(attrs, "axis", "epsilon"))
    return [y, None, None]

"""Normalization: BatchNormalization (inference and training mode), LRN, Softmax and LogSoftmax,
LayerNormalization, RMSNormalization, GroupNormalization, InstanceNormalization, LpNormalization,
MeanVarianceNormalization, and Dropout (the identity in inference)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import InvalidArgument, UnsupportedOp
from ..loader import Context, np_dtype
from .base import Tensor, converter, ints, pick, reshape, scalar


def _wants(ctx: Context, k: int) -> bool:
    """Whether the model reads output ``k`` of the current node."""
    return k < len(ctx.node.output) and ctx.node.output[k] != ""


def _scalar(value: np.ndarray, what: str) -> Any:
    """The one element of a scalar input; InvalidArgument when it holds another number of elements."""
    value = np.asarray(value)
    if value.size != 1:
        raise InvalidArgument(f"{what} must hold one value, got shape {value.shape}")
    return value.reshape(-1)[0]


# -- batch normalization ---------------------------------------------------------------------------------------------
@converter("BatchNormalization")
def _batch_norm(ctx, attrs):
    if ctx.opset < 9 and attrs.get("spatial", 1) == 0:
        raise UnsupportedOp("BatchNormalization with spatial=0")
    if attrs.get("training_mode", 0):
        return _batch_norm_training(ctx, attrs)
    y = ctx.op("batch_normalization", ctx.values()[:5], **pick(attrs, "epsilon"))
    return [y] + [None] * 4


def _batch_norm_training(ctx: Context, attrs: dict) -> list[Tensor]:
    """training_mode=1: normalized with the batch's own mean and (biased) variance over every axis but the
    channels; the running statistics updated as input * momentum + batch statistic * (1 - momentum)."""
    x, scale, bias, mean, var = (ctx.raw(i) for i in range(5))
    C = x.shape[1]
    axes = [0] + list(range(2, len(x.shape)))
    batch_mean = ctx.op("mean", [x], "batch_mean", axes=axes, keepdims=True)
    d = ctx.op("sub", [x, batch_mean], "centered")
    batch_var = ctx.op("mean", [ctx.op("mul", [d, d], "squared")], "batch_var", axes=axes, keepdims=True)
    batch_mean, batch_var = reshape(ctx, batch_mean, (C,), "mean_c"), reshape(ctx, batch_var, (C,), "var_c")
    y = ctx.op("batch_normalization", [x, scale, bias, batch_mean, batch_var], **pick(attrs, "epsilon"))
    momentum = float(attrs.get("momentum", 0.9))
    outs: list[Tensor | None] = [y]
    for k, (running, batch) in enumerate(((mean, batch_mean), (var, batch_var)), 1):
        if _wants(ctx, k):
            kept = ctx.op("mul", [running, scalar(momentum, x.dtype)], f"keep{k}")
            new = ctx.op("mul", [batch, scalar(1 - momentum, x.dtype)], f"new{k}")
            outs.append(ctx.op("add", [kept, new], f"running{k}"))
        else:
            outs.append(None)
    return outs


@converter("LRN")
def _lrn(ctx, attrs):
    return [ctx.op("lrn", [ctx.raw(0)], **pick(attrs, "size", "alpha", "beta", "bias"))]


# -- along one axis --------------------------------------------------------------------------------------------------
@converter("Softmax", "LogSoftmax")
def _softmax(ctx, attrs):
    op = "softmax" if ctx.node.op_type == "Softmax" else "log_softmax"
    x = ctx.raw(0)
    rank = len(x.shape)
    if ctx.opset >= 13:
        return [ctx.op(op, [x], axis=int(attrs.get("axis", -1)))]
    # before opset 13: the input is coerced to 2-D, rows of the axes from ``axis`` on
    axis = int(attrs.get("axis", 1))
    axis = axis + rank if axis < 0 else axis
    if axis == rank - 1 or rank <= 1:
        return [ctx.op(op, [x], axis=-1)]
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    flat = reshape(ctx, x, (rows, int(np.prod(x.shape[axis:], dtype=np.int64))), "coerce2d")
    y = ctx.op(op, [flat], "2d", axis=-1)
    return [reshape(ctx, y, x.shape, "")]


@converter("LpNormalization")
def _lp_norm(ctx, attrs):
    return [ctx.op("lp_normalization", [ctx.raw(0)], axis=int(attrs.get("axis", -1)), p=int(attrs.get("p", 2)))]


# -- over trailing axes, groups and channels -------------------------------------------------------------------------
@converter("LayerNormalization")
def _layer_norm(ctx, attrs):
    kw = pick(attrs, "axis", "epsilon")
    if _wants(ctx, 1) or _wants(ctx, 2):
        kw.update(stats=True, stash_type=np_dtype(int(attrs.get("stash_type", 1))))
        return ctx.add("layer_normalization", ctx.values()[:3], **kw)
    return [ctx.op("layer_normalization", ctx.values()[:3], **kw), None, None]


@converter("RMSNormalization")
def _rms_norm(ctx, attrs):
    return [ctx.op("rms_normalization", ctx.values()[:2], **pick(attrs, "axis", "epsilon"))]


@converter("GroupNormalization")
def _group_norm(ctx, attrs):
    x, scale, bias = ctx.raw(0), ctx.raw(1), ctx.raw(2)
    if "num_groups" not in attrs:
        raise InvalidArgument("GroupNormalization needs the attribute num_groups")
    groups = int(attrs["num_groups"])
    if ctx.opset < 21 and len(x.shape) >= 2 and groups >= 1 and x.shape[1] % groups == 0:
        # GroupNormalization-18: one scale and bias per group, repeated over the group's channels
        index = np.arange(x.shape[1], dtype=np.int64) // (x.shape[1] // groups)
        scale, bias = (p[index] if isinstance(p, np.ndarray) else ctx.op("gather", [p, index], f"per_channel{k}")
                       for k, p in enumerate((scale, bias)))
    return [ctx.op("group_normalization", [x, scale, bias], num_groups=groups, **pick(attrs, "epsilon"))]


@converter("InstanceNormalization")
def _instance_norm(ctx, attrs):
    x = ctx.raw(0)
    if len(x.shape) < 2:
        raise UnsupportedOp(f"InstanceNormalization of a rank-{len(x.shape)} input (needs N, C, ...)")
    return [ctx.op("group_normalization", [x, ctx.raw(1), ctx.raw(2)], num_groups=x.shape[1],
                   **pick(attrs, "epsilon"))]


@converter("MeanVarianceNormalization")
def _mvn(ctx, attrs):
    """(x - mean) / (sqrt(variance) + 1e-9) over ``axes`` (default N, H, W), as ONNX's function body."""
    x = ctx.raw(0)
    axes = ints(attrs.get("axes", [0, 2, 3]))
    mean = ctx.op("mean", [x], "mean", axes=axes, keepdims=True)
    d = ctx.op("sub", [x, mean], "centered")
    var = ctx.op("mean", [ctx.op("mul", [d, d], "squared")], "variance", axes=axes, keepdims=True)
    std = ctx.op("add", [ctx.op("sqrt", [var], "std"), scalar(1e-9, x.dtype)], "std_eps")
    return [ctx.op("div", [d, std])]


# -- dropout ---------------------------------------------------------------------------------------------------------
@converter("Dropout")
def _dropout(ctx, attrs):
    """The identity with an all-true mask: in inference (old opsets' is_test changes nothing here), and in
    training mode with ratio 0.  Training with a ratio above 0 draws a random mask: refused."""
    x = ctx.raw(0)
    training = ctx.opset >= 12 and ctx.has(2) and bool(_scalar(ctx.need_const(2, "training_mode"), "training_mode"))
    if training:
        ratio = ctx.need_const(1, "ratio")
        ratio = 0.5 if ratio is None else float(_scalar(ratio, "ratio"))
        if ratio != 0:
            raise UnsupportedOp(f"Dropout in training mode with ratio {ratio} draws a random mask; devicelayer "
                                "runs Dropout as the identity (inference, or training with ratio 0)")
    return [x, np.ones(x.shape, dtype=bool)]


"""Unary elementwise ONNX ops, Identity, Cast and CastLike, Clip."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import UnsupportedOp
from ..loader import Context, np_dtype
from .base import Tensor, converter, CONVERTERS, pick, cast, scalar


# -- unary ---------------------------------------------------------------------------------------------------------
_UNARY = {
    "Relu": ("relu", ()), "Sigmoid": ("sigmoid", ()), "Tanh": ("tanh", ()), "Softsign": ("softsign", ()),
    "Softplus": ("softplus", ()), "Exp": ("exp", ()), "Log": ("log", ()), "Sqrt": ("sqrt", ()),
    "Reciprocal": ("reciprocal", ()), "Erf": ("erf", ()), "Floor": ("floor", ()), "Ceil": ("ceil", ()),
    "Sin": ("sin", ()), "Cos": ("cos", ()), "LeakyRelu": ("leaky_relu", ("alpha",)), "Elu": ("elu", ("alpha",)),
    "Selu": ("selu", ("alpha", "gamma")), "HardSigmoid": ("hard_sigmoid", ("alpha", "beta")),
}


def _unary(ctx: Context, attrs: dict[str, Any]) -> list[Tensor]:
    op, names = _UNARY[ctx.node.op_type]
    x = ctx.raw(0)
    if op == "relu" and x.dtype.kind in "iu":  # integer Relu: max(x, 0)
        return [ctx.op("max", [x, scalar(0, x.dtype)])]
    return [ctx.op(op, [x], **pick(attrs, *names))]


for _t in _UNARY:
    CONVERTERS[_t] = _unary


@converter("Neg", "Abs")
def _neg_abs(ctx, attrs):
    x = ctx.raw(0)
    if x.dtype.kind in "iu":  # the unary kernels are float-only: compose
        neg = ctx.op("sub", [scalar(0, x.dtype), x], "neg")
        return [neg if ctx.node.op_type == "Neg" else ctx.op("max", [x, neg])]
    return [ctx.op(ctx.node.op_type.lower(), [x])]


@converter("Gelu")
def _gelu(ctx, attrs):
    approx = attrs.get("approximate", "none")
    if approx not in ("none", "tanh"):
        raise UnsupportedOp(f"Gelu approximate={approx!r}")
    return [ctx.op("gelu_tanh" if approx == "tanh" else "gelu", [ctx.raw(0)])]


@converter("Identity")
def _identity(ctx, attrs):
    return [ctx.raw(0)]


@converter("Cast")
def _cast_node(ctx, attrs):
    return [cast(ctx, ctx.raw(0), np_dtype(int(attrs["to"])), "")]


@converter("CastLike")
def _cast_like(ctx, attrs):
    return [cast(ctx, ctx.raw(0), ctx.raw(1).dtype, "")]


@converter("Clip")
def _clip(ctx, attrs):
    x = ctx.raw(0)
    if ctx.opset < 11:
        lo, hi = attrs.get("min"), attrs.get("max")
        lo_t = None if lo is None else scalar(lo, x.dtype)
        hi_t = None if hi is None else scalar(hi, x.dtype)
    else:
        lo_t = ctx.raw(1) if ctx.has(1) else None
        hi_t = ctx.raw(2) if ctx.has(2) else None
    consts = all(t is None or isinstance(t, np.ndarray) for t in (lo_t, hi_t))
    if x.dtype.kind == "f" and consts:
        kw = {}
        if lo_t is not None:
            kw["min"] = float(np.asarray(lo_t).reshape(-1)[0])
        if hi_t is not None:
            kw["max"] = float(np.asarray(hi_t).reshape(-1)[0])
        if "min" in kw and "max" in kw and kw["min"] > kw["max"]:  # ONNX: every element becomes max
            return [ctx.op("add", [ctx.op("mul", [x, scalar(0, x.dtype)], "zero"), scalar(kw["max"], x.dtype)])]
        return [ctx.op("clip", [x], **kw)]
    y = x
    if lo_t is not None:
        y = ctx.op("max", [y, lo_t], "min")
    if hi_t is not None:
        y = ctx.op("min", [y, hi_t], "max")
    return [y]

"""Unary elementwise ONNX ops, Identity, Cast and CastLike, Clip, Shrink."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...dtypes import is_float
from ...errors import GraphError, UnsupportedOp
from ..loader import Context, np_dtype
from .base import Tensor, converter, CONVERTERS, pick, scalar


# -- unary ---------------------------------------------------------------------------------------------------------
_UNARY = {
    "Relu": ("relu", ()), "Sigmoid": ("sigmoid", ()), "Tanh": ("tanh", ()), "Softsign": ("softsign", ()),
    "Softplus": ("softplus", ()), "Exp": ("exp", ()), "Log": ("log", ()), "Sqrt": ("sqrt", ()),
    "Reciprocal": ("reciprocal", ()), "Erf": ("erf", ()), "Floor": ("floor", ()), "Ceil": ("ceil", ()),
    "Round": ("round", ()), "Sign": ("sign", ()), "Neg": ("neg", ()), "Abs": ("abs", ()),
    "Sin": ("sin", ()), "Cos": ("cos", ()), "Tan": ("tan", ()), "Asin": ("asin", ()), "Acos": ("acos", ()),
    "Atan": ("atan", ()), "Sinh": ("sinh", ()), "Cosh": ("cosh", ()), "Asinh": ("asinh", ()),
    "Acosh": ("acosh", ()), "Atanh": ("atanh", ()), "Mish": ("mish", ()), "HardSwish": ("hard_swish", ()),
    "LeakyRelu": ("leaky_relu", ("alpha",)), "Elu": ("elu", ("alpha",)), "Celu": ("celu", ("alpha",)),
    "ThresholdedRelu": ("thresholded_relu", ("alpha",)), "Swish": ("swish", ("alpha",)),
    "Selu": ("selu", ("alpha", "gamma")), "HardSigmoid": ("hard_sigmoid", ("alpha", "beta")),
}


def _unary(ctx: Context, attrs: dict[str, Any]) -> list[Tensor]:
    op, names = _UNARY[ctx.node.op_type]
    return [ctx.op(op, [ctx.raw(0)], **pick(attrs, *names))]


for _t in _UNARY:
    CONVERTERS[_t] = _unary


@converter("Gelu")
def _gelu(ctx, attrs):
    approx = attrs.get("approximate", "none")
    if approx not in ("none", "tanh"):
        raise UnsupportedOp(f"Gelu approximate={approx!r}")
    return [ctx.op("gelu_tanh" if approx == "tanh" else "gelu", [ctx.raw(0)])]


@converter("Shrink")
def _shrink(ctx, attrs):
    x = ctx.raw(0)
    kw = pick(attrs, "bias", "lambd")
    if is_float(x.dtype):
        return [ctx.op("shrink", [x], **kw)]
    # integers, as the function body does: the attributes cast to x's dtype, compared and added there
    bias, lambd = scalar(kw.get("bias", 0.0), x.dtype), scalar(kw.get("lambd", 0.5), x.dtype)
    neg_lambd = scalar(-float(kw.get("lambd", 0.5)), x.dtype)
    low = ctx.op("where", [ctx.op("less", [x, neg_lambd], "low"), ctx.op("add", [x, bias], "plus"),
                           scalar(0, x.dtype)], "low_where")
    return [ctx.op("where", [ctx.op("greater", [x, lambd], "high"), ctx.op("sub", [x, bias], "minus"), low])]


@converter("Identity")
def _identity(ctx, attrs):
    return [ctx.raw(0)]


def _cast_to(ctx: Context, attrs: dict[str, Any], x: Tensor, to: np.dtype) -> Tensor:
    """``x`` as ``to``, with Cast's ``saturate`` and ``round_mode`` where they are given."""
    if x.dtype == to:
        return x
    return ctx.op("cast", [x], to=to, **pick(attrs, "saturate", "round_mode"))


@converter("Cast")
def _cast_node(ctx, attrs):
    to = attrs["to"]
    if isinstance(to, str):  # opset 1-5: the type's name
        import onnx

        try:
            to = onnx.TensorProto.DataType.Value(to.upper())
        except ValueError:
            raise UnsupportedOp(f"Cast to {to!r}: not an ONNX element type") from None
    return [_cast_to(ctx, attrs, ctx.raw(0), np_dtype(int(to)))]


@converter("CastLike")
def _cast_like(ctx, attrs):
    return [_cast_to(ctx, attrs, ctx.raw(0), ctx.raw(1).dtype)]


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
    if is_float(x.dtype) and consts:
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


@converter("SwiGLU")
def _swiglu(ctx, attrs):
    """Swish_alpha(A) * B: the gate's Swish fused with nothing else, then the product."""
    a, b = ctx.raw(0), ctx.raw(1)
    if tuple(a.shape) != tuple(b.shape):
        raise GraphError(f"SwiGLU's gate {tuple(a.shape)} and value {tuple(b.shape)} must have one shape")
    return [ctx.op("mul", [ctx.op("swish", [a], "gate", alpha=float(attrs.get("alpha", 1.0))), b])]

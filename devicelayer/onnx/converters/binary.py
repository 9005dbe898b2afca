"""Broadcasting binary ONNX ops (arithmetic, Mod, variadic Max/Min/Sum/Mean), Where and PRelu."""

from __future__ import annotations

from typing import Any

from ...dtypes import is_float, is_integer
from ...errors import UnsupportedOp
from ..loader import Context
from .base import Tensor, converter, reshape, cast, scalar


# -- binary --------------------------------------------------------------------------------------------------------
def legacy_broadcast(ctx: Context, attrs: dict[str, Any], a: Tensor, b: Tensor) -> Tensor:
    """Opset < 7 ``broadcast=1, axis=k``: B's dims line up with A's starting at ``axis``."""
    if ctx.opset < 7 and attrs.get("broadcast") and "axis" in attrs:
        ra, rb = len(a.shape), len(b.shape)
        axis = int(attrs["axis"])
        axis = axis + ra if axis < 0 else axis
        trailing = ra - axis - rb
        if trailing > 0:
            b = reshape(ctx, b, tuple(b.shape) + (1,) * trailing, "broadcast")
    return b


_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow"}


@converter(*_BINARY)
def _binary(ctx, attrs):
    op = _BINARY[ctx.node.op_type]
    a, b = ctx.raw(0), ctx.raw(1)
    b = legacy_broadcast(ctx, attrs, a, b)
    if a.dtype.kind == "b" or b.dtype.kind == "b":
        raise UnsupportedOp(f"{ctx.node.op_type} of bool tensors")
    if op == "pow" and b.dtype != a.dtype and not (is_integer(a.dtype) and is_float(b.dtype)):
        b = cast(ctx, b, a.dtype, "exponent")  # an integer base keeps a float exponent: computed in float
    return [ctx.op(op, [a, b])]


@converter("Mod")
def _mod(ctx, attrs):
    return [ctx.op("mod", [ctx.raw(0), ctx.raw(1)], fmod=int(attrs.get("fmod", 0)))]


@converter("Max", "Min", "Sum", "Mean")
def _variadic(ctx, attrs):
    op = {"Max": "max", "Min": "min", "Sum": "add", "Mean": "add"}[ctx.node.op_type]
    xs = [ctx.raw(i) for i in range(len(ctx.node.input)) if ctx.has(i)]
    if not xs:
        raise UnsupportedOp(f"{ctx.node.op_type} with no inputs")
    y = xs[0]
    for k, x in enumerate(xs[1:], 1):
        y = ctx.op(op, [y, x], f"{k}" if k < len(xs) - 1 or ctx.node.op_type == "Mean" else "")
    if ctx.node.op_type == "Mean" and len(xs) > 1:
        y = ctx.op("div", [y, scalar(len(xs), y.dtype)])
    return [y]  # one input: that input, unchanged


@converter("Where")
def _where(ctx, attrs):
    c = ctx.raw(0)
    if c.dtype.kind != "b":
        c = cast(ctx, c, bool, "cond")
    return [ctx.op("where", [c, ctx.raw(1), ctx.raw(2)])]


@converter("PRelu")
def _prelu(ctx, attrs):
    x, slope = ctx.raw(0), ctx.raw(1)
    if len(slope.shape) == 1 and len(x.shape) > 2 and slope.shape[0] == x.shape[1] and slope.shape[0] != x.shape[-1]:
        # opset < 7 (and PyTorch exports): one slope per channel, channels on axis 1
        slope = reshape(ctx, slope, (slope.shape[0],) + (1,) * (len(x.shape) - 2), "slope")
    if slope.dtype != x.dtype:
        slope = cast(ctx, slope, x.dtype, "slope_cast")
    return [ctx.op("prelu", [x, slope])]

"""Comparison, logic and bitwise ONNX ops: Equal, Less, Greater, LessOrEqual, GreaterOrEqual, And, Or, Xor, Not,
BitwiseAnd/Or/Xor/Not, BitShift, IsNaN, IsInf."""

from __future__ import annotations

from .base import converter, pick
from .binary import legacy_broadcast

_BINARY = {"Equal": "equal", "Less": "less", "Greater": "greater", "LessOrEqual": "less_equal",
           "GreaterOrEqual": "greater_equal", "And": "logical_and", "Or": "logical_or", "Xor": "logical_xor",
           "BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor"}
_UNARY = {"Not": "logical_not", "BitwiseNot": "bitwise_not", "IsNaN": "is_nan"}


@converter(*_BINARY)
def _binary(ctx, attrs):
    a, b = ctx.raw(0), ctx.raw(1)
    return [ctx.op(_BINARY[ctx.node.op_type], [a, legacy_broadcast(ctx, attrs, a, b)])]


@converter(*_UNARY)
def _unary(ctx, attrs):
    return [ctx.op(_UNARY[ctx.node.op_type], [ctx.raw(0)])]


@converter("IsInf")
def _is_inf(ctx, attrs):
    return [ctx.op("is_inf", [ctx.raw(0)], **pick(attrs, "detect_negative", "detect_positive"))]


@converter("BitShift")
def _bit_shift(ctx, attrs):
    return [ctx.op("bit_shift", [ctx.raw(0), ctx.raw(1)], **pick(attrs, "direction"))]

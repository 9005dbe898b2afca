"""QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, and the quantized products: MatMulInteger,
ConvInteger, QLinearMatMul, QLinearConv."""

from __future__ import annotations

import math

import numpy as np

from ...errors import UnsupportedOp
from ..loader import Context
from .base import Tensor, converter, pick, reshape


def onnx_dtype(elem_type: int) -> np.dtype:
    """The NumPy dtype of an ONNX element type, ml_dtypes' (int4, float8 ...) included."""
    from onnx import helper

    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(int(elem_type)))
    except Exception:
        raise UnsupportedOp(f"ONNX element type {elem_type} has no NumPy dtype") from None


def _optional(ctx: Context, i: int) -> list[Tensor]:
    return [ctx.raw(i)] if ctx.has(i) else []


@converter("QuantizeLinear")
def _quantize_linear(ctx, attrs):
    kw = pick(attrs, "axis", "block_size", "saturate")
    for name in ("output_dtype", "precision"):
        if attrs.get(name):
            kw[name] = onnx_dtype(attrs[name])
    return [ctx.op("quantize_linear", [ctx.raw(0), ctx.raw(1), *_optional(ctx, 2)], **kw)]


@converter("DequantizeLinear")
def _dequantize_linear(ctx, attrs):
    kw = pick(attrs, "axis", "block_size")
    if attrs.get("output_dtype"):
        kw["output_dtype"] = onnx_dtype(attrs["output_dtype"])
    return [ctx.op("dequantize_linear", [ctx.raw(0), ctx.raw(1), *_optional(ctx, 2)], **kw)]


@converter("DynamicQuantizeLinear")
def _dynamic_quantize_linear(ctx, attrs):
    return ctx.add("dynamic_quantize_linear", [ctx.raw(0)])


# -- quantized products ----------------------------------------------------------------------------------------
_CONV_ATTRS = ("strides", "pads", "dilations", "group", "auto_pad", "kernel_shape")


def _zero_point(ctx: Context, i: int, like: Tensor) -> Tensor:
    """Input ``i`` (a zero point), or 0 of ``like``'s dtype when absent."""
    return ctx.raw(i) if ctx.has(i) else np.zeros((), like.dtype)


def _scale_along(ctx: Context, scale: Tensor, axis: int, rank: int, suffix: str) -> Tensor:
    """A scale of one element, or one per index of ``axis`` of a rank-``rank`` tensor, shaped to broadcast
    there."""
    size = math.prod(scale.shape)
    if size == 1:
        return reshape(ctx, scale, (), suffix)
    return reshape(ctx, scale, [size if d == axis % rank else 1 for d in range(rank)], suffix)


def _multiplier(ctx: Context, scale_a: Tensor, scale_b: Tensor, scale_y: Tensor) -> Tensor:
    """``scale_a * scale_b / scale_y`` in the scales' dtype (folded now when all are constants)."""
    if all(isinstance(t, np.ndarray) for t in (scale_a, scale_b, scale_y)):
        return np.asarray(scale_a * scale_b / scale_y)
    product = ctx.op("mul", [scale_a, scale_b], "scale_product")
    return ctx.op("div", [product, reshape(ctx, scale_y, (), "y_scale")], "multiplier")


@converter("MatMulInteger")
def _matmul_integer(ctx, attrs):
    a, b = ctx.raw(0), ctx.raw(1)
    return [ctx.op("matmul_integer", [a, b, _zero_point(ctx, 2, a), _zero_point(ctx, 3, b)])]


@converter("ConvInteger")
def _conv_integer(ctx, attrs):
    x, w = ctx.raw(0), ctx.raw(1)
    return [ctx.op("conv_integer", [x, w, _zero_point(ctx, 2, x), _zero_point(ctx, 3, w)],
                   **pick(attrs, *_CONV_ATTRS))]


@converter("QLinearMatMul")
def _qlinear_matmul(ctx, attrs):
    a, b = ctx.raw(0), ctx.raw(3)
    acc = ctx.op("matmul_integer", [a, b, _zero_point(ctx, 2, a), _zero_point(ctx, 5, b)], "acc")
    rank = len(acc.shape)
    scale_a = _scale_along(ctx, ctx.raw(1), -2, max(rank, 2), "a_scale") if len(a.shape) > 1 else ctx.raw(1)
    scale_b = _scale_along(ctx, ctx.raw(4), -1, max(rank, 1), "b_scale")
    mult = _multiplier(ctx, scale_a, scale_b, ctx.raw(6))
    return [_requantize(ctx, acc, mult, a)]


@converter("QLinearConv")
def _qlinear_conv(ctx, attrs):
    x, w = ctx.raw(0), ctx.raw(3)
    ins = [x, w, _zero_point(ctx, 2, x), _zero_point(ctx, 5, w)] + ([ctx.raw(8)] if ctx.has(8) else [])
    acc = ctx.op("conv_integer", ins, "acc", **pick(attrs, *_CONV_ATTRS))
    scale_w = _scale_along(ctx, ctx.raw(4), 1, len(acc.shape), "w_scale")
    mult = _multiplier(ctx, reshape(ctx, ctx.raw(1), (), "x_scale"), scale_w, ctx.raw(6))
    return [_requantize(ctx, acc, mult, x)]


def _requantize(ctx: Context, acc: Tensor, mult: Tensor, like: Tensor) -> Tensor:
    """``acc`` scaled by ``mult`` to the output zero point's dtype (input 7), or ``like``'s without one."""
    if ctx.has(7):
        return ctx.op("requantize", [acc, mult, ctx.raw(7)])
    return ctx.op("requantize", [acc, mult], to=like.dtype)


__all__ = ["onnx_dtype"]

"""QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, and the quantized products: MatMulInteger,
ConvInteger, QLinearMatMul, QLinearConv."""

from __future__ import annotations

from typing import Any

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


__all__ = ["onnx_dtype"]

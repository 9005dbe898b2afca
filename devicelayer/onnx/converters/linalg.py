"""MatMul and Gemm, convolutions and pooling."""

from __future__ import annotations

import numpy as np

from ...errors import InvalidArgument
from .base import converter, ints, pick


# -- matrix products and convolutions ----------------------------------------------------------------------------
@converter("MatMul")
def _matmul(ctx, attrs):
    return [ctx.op("matmul", [ctx.raw(0), ctx.raw(1)])]


@converter("Gemm")
def _gemm(ctx, attrs):
    ins = [ctx.raw(0), ctx.raw(1)]
    kw = pick(attrs, "alpha", "beta", "transA", "transB")
    if ctx.has(2):
        c = ctx.raw(2)
        if kw.get("beta", 1.0) != 0.0:
            ins.append(c)
    return [ctx.op("gemm", ins, **kw)]


_CONV_ATTRS = ("strides", "pads", "dilations", "group", "auto_pad", "kernel_shape")


@converter("Conv")
def _conv(ctx, attrs):
    return [ctx.op("conv", ctx.values(), **pick(attrs, *_CONV_ATTRS))]


@converter("ConvTranspose")
def _conv_transpose(ctx, attrs):
    return [ctx.op("conv_transpose", ctx.values(), **pick(attrs, *_CONV_ATTRS, "output_padding", "output_shape"))]


@converter("CausalConvWithState")
def _causal_conv_with_state(ctx, attrs):
    """A depthwise causal 1-D conv over the past state (zeros when absent) followed by the input; the present
    state is the last k - 1 positions of that sequence."""
    x, w = ctx.raw(0), ctx.raw(1)
    if len(x.shape) != 3 or len(w.shape) != 3 or w.shape[:2] != (x.shape[1], 1):
        raise InvalidArgument(f"CausalConvWithState takes input (B, C, L) and weight (C, 1, k), got "
                              f"{tuple(x.shape)} and {tuple(w.shape)}")
    activation = attrs.get("activation", "none")
    if activation not in ("none", "silu", "swish"):
        raise InvalidArgument(f"CausalConvWithState activation must be 'none', 'silu' or 'swish', got {activation!r}")
    batch, channels, length = x.shape
    k = w.shape[2]
    past = ctx.raw(3) if ctx.has(3) else np.zeros((batch, channels, k - 1), x.dtype)
    if tuple(past.shape) != (batch, channels, k - 1):
        raise InvalidArgument(f"CausalConvWithState past_state must have shape {(batch, channels, k - 1)}, "
                              f"got {tuple(past.shape)}")
    sequence = ctx.op("concat", [past, x], "sequence", axis=2) if k > 1 else x
    y = ctx.op("conv", [sequence, w] + ([ctx.raw(2)] if ctx.has(2) else []), "conv", group=channels)
    if activation != "none":
        y = ctx.op("mul", [y, ctx.op("sigmoid", [y], "gate")], "silu")
    if k > 1:
        present = ctx.op("slice", [sequence], "present", starts=(length,), ends=(length + k - 1,), axes=(2,),
                         steps=(1,))
    else:
        present = np.zeros((batch, channels, 0), x.dtype)
    return [y, present]


_POOL_ATTRS = ("kernel_shape", "strides", "pads", "dilations", "ceil_mode", "auto_pad")


@converter("MaxPool")
def _max_pool(ctx, attrs):
    kw = pick(attrs, *_POOL_ATTRS, "storage_order")
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        return ctx.add("max_pool_with_indices", [ctx.raw(0)], **kw)
    return [ctx.op("max_pool", [ctx.raw(0)], **kw)]


@converter("LpPool")
def _lp_pool(ctx, attrs):
    return [ctx.op("lp_pool", [ctx.raw(0)], **pick(attrs, *_POOL_ATTRS, "p"))]


@converter("MaxUnpool")
def _max_unpool(ctx, attrs):
    kw = pick(attrs, "kernel_shape", "strides", "pads")
    shape = ctx.need_const(2, "output_shape")
    if shape is not None:
        kw["output_shape"] = tuple(ints(shape))
    return [ctx.op("max_unpool", [ctx.raw(0), ctx.raw(1)], **kw)]


@converter("AveragePool")
def _average_pool(ctx, attrs):
    return [ctx.op("average_pool", [ctx.raw(0)], **pick(attrs, *_POOL_ATTRS, "count_include_pad"))]


@converter("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(ctx, attrs):
    op = "global_average_pool" if ctx.node.op_type == "GlobalAveragePool" else "global_max_pool"
    return [ctx.op(op, [ctx.raw(0)])]

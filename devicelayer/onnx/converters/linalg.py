"""MatMul and Gemm, convolutions and pooling."""

from __future__ import annotations



from .base import converter, pick


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


_POOL_ATTRS = ("kernel_shape", "strides", "pads", "dilations", "ceil_mode", "auto_pad")


@converter("MaxPool")
def _max_pool(ctx, attrs):
    y = ctx.op("max_pool", [ctx.raw(0)], **pick(attrs, *_POOL_ATTRS, "storage_order"))
    return [y, None]  # Indices: not produced


@converter("AveragePool")
def _average_pool(ctx, attrs):
    return [ctx.op("average_pool", [ctx.raw(0)], **pick(attrs, *_POOL_ATTRS, "count_include_pad"))]


@converter("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(ctx, attrs):
    op = "global_average_pool" if ctx.node.op_type == "GlobalAveragePool" else "global_max_pool"
    return [ctx.op(op, [ctx.raw(0)])]

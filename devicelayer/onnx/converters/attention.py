"""Attention blocks: Attention (opsets 23 to 25) and RotaryEmbedding."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import InvalidArgument
from ..loader import Context
from .base import Tensor, cast, converter, pick, reshape

#: ONNX element types softmax_precision may name (float, float16, double, bfloat16)
_SOFTMAX_PRECISIONS = (1, 10, 11, 16)


def _wants(ctx: Context, k: int) -> bool:
    return k < len(ctx.node.output) and ctx.node.output[k] != ""


def _split_heads(ctx: Context, x: Tensor, heads: Any, what: str) -> Tensor:
    """(B, S, H·D) -> (B, H, S, D)."""
    B, S, hidden = x.shape
    if not isinstance(heads, int) or heads < 1 or hidden % heads:
        raise InvalidArgument(f"3-D {what} of hidden size {hidden} needs a head count dividing it, got {heads!r}")
    x = reshape(ctx, x, (B, S, heads, hidden // heads), f"{what}_heads")
    return ctx.op("transpose", [x], f"{what}_bhsd", perm=(0, 2, 1, 3))


@converter("Attention")
def _attention(ctx, attrs):
    """Q, K, V 3-D (heads from q_num_heads, kv_num_heads) or 4-D; the past cache concatenated before K and V
    (present_key, present_value) and its length the causal offset; softmax_precision is honoured as a floor:
    the softmax computes in float32, or float64 for float64 inputs."""
    q, k, v = ctx.raw(0), ctx.raw(1), ctx.raw(2)
    rank = len(q.shape)
    if rank == 3:
        q = _split_heads(ctx, q, attrs.get("q_num_heads"), "q")
        k = _split_heads(ctx, k, attrs.get("kv_num_heads"), "k")
        v = _split_heads(ctx, v, attrs.get("kv_num_heads"), "v")
    elif rank != 4 or len(k.shape) != 4 or len(v.shape) != 4:
        raise InvalidArgument(f"Q, K and V must all be 3-D or all 4-D, got {q.shape}, {k.shape}, {v.shape}")
    precision = attrs.get("softmax_precision")
    if precision is not None and precision not in _SOFTMAX_PRECISIONS:
        raise InvalidArgument(f"softmax_precision must be one of {_SOFTMAX_PRECISIONS}, got {precision}")
    kw: dict[str, Any] = pick(attrs, "scale", "is_causal", "softcap", "left_window_size", "right_window_size")
    if ctx.has(4) != ctx.has(5):
        raise InvalidArgument("past_key and past_value must be given together")
    if ctx.has(4):
        if ctx.has(6):
            raise InvalidArgument("nonpad_kv_seqlen cannot be combined with past_key and past_value")
        past_key, past_value = ctx.raw(4), ctx.raw(5)
        k = ctx.op("concat", [past_key, k], "present_key", axis=2)
        v = ctx.op("concat", [past_value, v], "present_value", axis=2)
        kw["offset"] = int(past_key.shape[2])
    ins = [q, k, v]
    if ctx.has(3):
        mask = ctx.raw(3)
        ins.append(mask if mask.dtype == np.bool_ else cast(ctx, mask, q.dtype, "mask"))
    if ctx.has(6):
        ins.append(ctx.raw(6))
    if _wants(ctx, 3):
        kw["qk_matmul_output_mode"] = int(attrs.get("qk_matmul_output_mode", 0))
    outs = ctx.add("attention", ins, **kw)
    y = outs[0]
    if rank == 3:  # (B, Hq, Sq, Dv) -> (B, Sq, Hq·Dv)
        B, H, S, D = y.shape
        y = reshape(ctx, ctx.op("transpose", [y], "y_bshd", perm=(0, 2, 1, 3)), (B, S, H * D), "y")
    return [y, k, v, outs[1] if len(outs) > 1 else None]


@converter("RotaryEmbedding")
def _rotary_embedding(ctx, attrs):
    return [ctx.op("rotary_embedding", ctx.values()[:4], **pick(attrs, "interleaved", "rotary_embedding_dim",
                                                               "num_heads"))]

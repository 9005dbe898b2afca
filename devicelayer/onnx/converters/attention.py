"""Attention blocks: Attention (opsets 23 to 25), RotaryEmbedding, and the recurrent blocks LinearAttention and
CausalConvWithState."""

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
    """(B, S, H·D) -> (B, S, H, D), a view (the attention op reads it sequence-major)."""
    B, S, hidden = x.shape
    if not isinstance(heads, int) or heads < 1 or hidden % heads:
        raise InvalidArgument(f"3-D {what} of hidden size {hidden} needs a head count dividing it, got {heads!r}")
    return reshape(ctx, x, (B, S, heads, hidden // heads), f"{what}_heads")


def _heads_major(ctx: Context, x: Tensor, what: str) -> Tensor:
    """(B, S, H, D) -> (B, H, S, D)."""
    return ctx.op("transpose", [x], f"{what}_bhsd", perm=(0, 2, 1, 3))


@converter("Attention")
def _attention(ctx, attrs):
    """Q, K, V 3-D (heads from q_num_heads, kv_num_heads: read sequence-major, no transposes but for a past cache
    or the present outputs) or 4-D; the past cache concatenated before K and V (present_key, present_value) and
    its length the causal offset; softmax_precision is honoured as a floor: the softmax computes in float32, or
    float64 for float64 inputs."""
    q, k, v = ctx.raw(0), ctx.raw(1), ctx.raw(2)
    rank = len(q.shape)
    major = [0, 0, 0, 0]
    if rank == 3:
        if len(k.shape) != 3 or len(v.shape) != 3:
            raise InvalidArgument(f"Q, K and V must all be 3-D or all 4-D, got {q.shape}, {k.shape}, {v.shape}")
        q = _split_heads(ctx, q, attrs.get("q_num_heads"), "q")
        k = _split_heads(ctx, k, attrs.get("kv_num_heads"), "k")
        v = _split_heads(ctx, v, attrs.get("kv_num_heads"), "v")
        major = [1, 1, 1, 1]
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
        if rank == 3:
            k, v, major[1], major[2] = _heads_major(ctx, k, "k"), _heads_major(ctx, v, "v"), 0, 0
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
    if any(major):
        kw["sequence_major"] = tuple(major)
    outs = ctx.add("attention", ins, **kw)
    y = outs[0]
    if rank == 3:  # (B, Sq, Hq, Dv) -> (B, Sq, Hq·Dv)
        B, S, H, D = y.shape
        y = reshape(ctx, y, (B, S, H * D), "y")
    # the present cache is (B, H, S, D): a transpose of a sequence-major K or V, only where the node's output wants it
    present = [_heads_major(ctx, t, what) if f and _wants(ctx, j) else t if not f else None
               for j, (t, f, what) in enumerate(((k, major[1], "k"), (v, major[2], "v")), 1)]
    return [y, *present, outs[1] if len(outs) > 1 else None]


@converter("RotaryEmbedding")
def _rotary_embedding(ctx, attrs):
    return [ctx.op("rotary_embedding", ctx.values()[:4], **pick(attrs, "interleaved", "rotary_embedding_dim",
                                                               "num_heads"))]


@converter("LinearAttention")
def _linear_attention(ctx, attrs):
    ins = [ctx.raw(i) for i in range(6) if ctx.has(i)]
    outs = ctx.add("linear_attention", ins, **pick(attrs, "q_num_heads", "kv_num_heads", "scale", "update_rule"))
    return outs


@converter("CausalConvWithState")
def _causal_conv_with_state(ctx, attrs):
    """A depthwise causal 1-D convolution over past_state (zeros when absent) followed by the input, an optional
    SiLU; present_state is the last kernel - 1 positions of that sequence."""
    x, w = ctx.raw(0), ctx.raw(1)
    activation = attrs.get("activation", "none")
    if activation not in ("none", "silu", "swish"):
        raise InvalidArgument(f"activation must be 'none', 'silu' or 'swish', got {activation!r}")
    if len(x.shape) != 3 or len(w.shape) != 3 or w.shape[0] != x.shape[1] or w.shape[1] != 1:
        raise InvalidArgument(f"input must be (B, C, L) and weight (C, 1, k), got {x.shape} and {w.shape}")
    B, C, L = x.shape
    k = w.shape[2]
    if k > 1:
        past = ctx.raw(3) if ctx.has(3) else np.zeros((B, C, k - 1), x.dtype)
        if tuple(past.shape) != (B, C, k - 1):
            raise InvalidArgument(f"past_state must have shape {(B, C, k - 1)}, got {past.shape}")
        padded = ctx.op("concat", [past, x], "padded", axis=2)
        present = ctx.op("slice", [padded], "present_state", starts=(L,), ends=(L + k - 1,), axes=(2,))
    else:
        padded, present = x, np.zeros((B, C, 0), x.dtype)
    y = ctx.op("conv", [padded, w] + ([ctx.raw(2)] if ctx.has(2) else []), "conv", group=C)
    if activation != "none":
        y = ctx.op("mul", [y, ctx.op("sigmoid", [y], "gate")], "silu")
    return [y, present]

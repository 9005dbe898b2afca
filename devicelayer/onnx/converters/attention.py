"""Attention blocks: RotaryEmbedding."""

from __future__ import annotations

from .base import converter, pick


@converter("RotaryEmbedding")
def _rotary_embedding(ctx, attrs):
    return [ctx.op("rotary_embedding", ctx.values()[:4], **pick(attrs, "interleaved", "rotary_embedding_dim",
                                                               "num_heads"))]

"""The transformer block of the benchmarks' GPT-2-style decoders (PyTorch): attention that takes the past keys
and values and returns them with the new ones, so an exported decoder carries its KV cache as tensors."""

from __future__ import annotations

from typing import Any


def cached_block(torch: Any) -> Any:
    """The block class, ``Block(width, heads)``: ``forward(x, past_k, past_v, mask) -> (x, k, v)``."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, width: int, heads: int) -> None:
            super().__init__()
            self.h, self.dk = heads, width // heads
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(approximate="tanh"),
                                     nn.Linear(4 * width, width))

        def forward(self, x, pk, pv, mask):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (z.view(b, t, self.h, self.dk).transpose(1, 2) for z in (q, k, v))
            k, v = torch.cat([pk, k], 2), torch.cat([pv, v], 2)
            s = q @ k.transpose(-1, -2) / self.dk ** 0.5
            total = k.shape[2]
            causal = torch.ones(t, total, dtype=torch.bool, device=x.device).tril(total - t)
            s = s.masked_fill(~causal, float("-inf")) + (1.0 - mask[:, None, None, :].float()) * -1e9
            y = (s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
            x = x + self.proj(y)
            return x + self.mlp(self.ln2(x)), k, v

    return Block

"""RNN, GRU and LSTM: one library op each (``kernels/ops/rnn.py``); a missing optional input between given ones
is filled with its ONNX default (zero bias and states, full sequence lengths)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..loader import Context
from .base import Tensor, cast, converter, pick

#: ONNX op -> (library op, gates, optional inputs in order, attributes passed through)
_LAYERS = {
    "RNN": ("rnn", 1, ("B", "sequence_lens", "initial_h"), ()),
    "GRU": ("gru", 3, ("B", "sequence_lens", "initial_h"), ("linear_before_reset",)),
    "LSTM": ("lstm", 4, ("B", "sequence_lens", "initial_h", "initial_c", "P"), ("input_forget",)),
}
_SHARED = ("direction", "hidden_size", "layout", "clip", "activations", "activation_alpha", "activation_beta")


def _default(name: str, x: Tensor, r: Tensor, gates: int, layout: int) -> np.ndarray:
    """The value ONNX gives an absent optional input."""
    dirs, hidden = r.shape[0], r.shape[2]
    steps, batch = (x.shape[1], x.shape[0]) if layout else x.shape[:2]
    if name == "sequence_lens":
        return np.full(batch, steps, np.int32)
    shape = {"B": (dirs, 2 * gates * hidden), "P": (dirs, 3 * hidden)}.get(
        name, (batch, dirs, hidden) if layout else (dirs, batch, hidden))
    return np.zeros(shape, x.dtype)


@converter("RNN", "GRU", "LSTM")
def _recurrent(ctx: Context, attrs: dict[str, Any]) -> list[Tensor]:
    op, gates, optional, own = _LAYERS[ctx.node.op_type]
    x, w, r = ctx.raw(0), ctx.raw(1), ctx.raw(2)
    kw = pick(attrs, *_SHARED, *own)  # opset 1's output_sequence only said whether Y is wanted
    given = [i for i in range(len(optional)) if ctx.has(3 + i)]
    ins: list[Tensor] = [x, w, r]
    for i in range(max(given, default=-1) + 1):
        name = optional[i]
        if not ctx.has(3 + i):
            ins.append(_default(name, x, r, gates, int(kw.get("layout", 0))))
        elif name == "sequence_lens":
            ins.append(cast(ctx, ctx.raw(3 + i), np.int32, "sequence_lens"))
        else:
            ins.append(ctx.raw(3 + i))
    return ctx.add(op, ins, **kw)

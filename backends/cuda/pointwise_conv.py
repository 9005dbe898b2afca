"""1x1 convolutions over channels-last activations as one cuBLASLt product on CUDA devices.

A 1x1 layer of stride 1 without padding or groups reads channels-last activations as rows: Y (N * H * W, M) =
X (N * H * W, C) @ W (M, C)^T, the filters as the graph holds them. Its bias, a summand of the output's shape and
ReLU are the product's epilogue, in the same launch. Where cuBLASLt refuses a call (operands less aligned than its
candidates were chosen for), cuBLAS's default product runs it, then one pass of the convolution epilogue.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import blaslt
from .blas import HALVES
from .timing import gpu_ms

#: element types the product takes here
DTYPES = frozenset({np.dtype(np.float32)} | HALVES)


def takes(ins: Any, outs: Any, attrs: dict) -> bool:
    """Whether the call is a 2-D 1x1 convolution of stride 1, unpadded and ungrouped, of a type the product takes."""
    xt, wt = ins[0], ins[1]
    return (len(xt.shape) == 4 and tuple(wt.shape[2:]) == (1, 1) and tuple(attrs["strides"]) == (1, 1)
            and not any(attrs["pads"]) and attrs["group"] == 1 and xt.dtype in DTYPES
            and attrs.get("activation") in (None, "relu"))


def dims(ins: Any) -> tuple[int, int, int]:
    """(rows, output channels, input channels) of the product."""
    xt, wt = ins[0], ins[1]
    return xt.shape[0] * math.prod(xt.shape[2:]), wt.shape[0], wt.shape[1]


def product(dev: Any, ins: Any, attrs: dict) -> Any:
    """The described cuBLASLt product of the call with its epilogue, None where cuBLASLt has none for it."""
    lt = dev._lt()
    if lt is None:
        return None
    rows, m, k = dims(ins)
    try:
        found = lt.product(ins[0].dtype, False, True, rows, m, k, bias=len(ins) >= 3, summand=len(ins) == 4,
                           activation="relu" if attrs.get("activation") == "relu" else None,
                           tf32=bool(attrs.get("allow_tf32")))
    except blaslt.LtError:
        return None
    return found if found.candidates else None


def tune(stream: Any, described: Any, x: int, w: int, b: int, y: int, z: int) -> tuple[int, float] | None:
    """(candidate, GPU ms) of the fastest cuBLASLt candidate on these buffers, None where none ran."""
    best: tuple[int, float] | None = None
    for choice in range(len(described.candidates)):
        def call(choice: int = choice) -> None:
            if not described.run(stream.ptr, x, w, y, b, choice, 1.0, z, 1.0):
                raise blaslt.LtError("refused")
        try:
            ms = gpu_ms(stream, call)
        except (blaslt.LtError, RuntimeError):
            continue
        if best is None or ms < best[1]:
            best = (choice, ms)
    return best


def run(dev: Any, stream: Any, ins: Any, outs: Any, attrs: dict, route: tuple[Any, int], x: int, w: int, b: int,
        y: int, z: int) -> None:
    """Queue the layer on ``stream`` (device addresses; ``route``: the product and its candidate, or (None, 0))."""
    described, choice = route
    if described is not None and described.run(stream.ptr, x, w, y, b, choice, 1.0, z, 1.0):
        return
    from .conv import epilogue  # (the convolution module builds on this one)

    rows, m, k = dims(ins)
    dev._blas().gemm(stream.ptr, ins[0].dtype, False, True, rows, m, k, 1.0, x, k, 0, w, k, 0, 0.0, y, m, 0, 1,
                     bool(attrs.get("allow_tf32")))
    with stream:
        epilogue(dev.index, ins, outs, attrs, b, y, z, last=True)

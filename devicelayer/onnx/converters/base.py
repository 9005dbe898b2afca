"""The converter registry and the helpers every family of converters shares.

One converter per ONNX op type: ONNX attributes and inputs (by opset) -> library ops.

A converter gets the Context (current node, its inputs, the graph being built)
and the node's attributes, and returns one entry per ONNX output: a graph
Value, a NumPy constant, or None for an output it does not produce (refused
by the loader when the model uses it).  Attribute names of the library ops
follow ONNX, so most converters pass them through after filtering out what an
old opset carried (``is_test``, ``consumed_inputs``, ``spatial`` ...).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ...graph.ir import Value
from ..loader import Context

CONVERTERS: dict[str, Callable[[Context, dict[str, Any]], Sequence[Any]]] = {}
FOLDERS: dict[str, Callable[[Context, dict[str, Any], list], list[np.ndarray] | None]] = {}

Tensor = Value | np.ndarray


def converter(*op_types: str):
    def register(fn):
        for t in op_types:
            CONVERTERS[t] = fn
        return fn
    return register


def pick(attrs: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: attrs[k] for k in names if k in attrs}


def ints(x: Any) -> list[int]:
    return [int(v) for v in np.asarray(x).reshape(-1).tolist()]


def reshape(ctx: Context, x: Tensor, shape: Sequence[int], suffix: str = "reshape") -> Tensor:
    shape = tuple(int(s) for s in shape)
    if tuple(x.shape) == shape:
        return x
    if isinstance(x, np.ndarray):
        return x.reshape(shape)
    return ctx.op("reshape", [x], suffix, shape=shape)


def cast(ctx: Context, x: Tensor, dtype: Any, suffix: str = "cast") -> Tensor:
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    if isinstance(x, np.ndarray):
        return x.astype(dtype)
    return ctx.op("cast", [x], suffix, to=dtype)


def scalar(x: float, dtype: Any) -> np.ndarray:
    return np.array(x, dtype=dtype)

"""NumPy evaluators of the ops exported graphs use for shape arithmetic, for nodes whose inputs are all
constants when a graph is specialised (ONNX's reference evaluator, the fallback, costs about a millisecond a
node; a model re-specialised per input shape folds dozens of them each time).  Each follows the ONNX
definition of its op; one that meets what it does not cover returns None and the reference evaluator runs.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ...kernels.ops.movement import slice_params
from .base import FOLDERS, ints


def _fold(*op_types: str) -> Callable:
    def register(fn: Callable) -> Callable:
        for t in op_types:
            FOLDERS[t] = fn
        return fn
    return register


def _same_dtype(*xs: np.ndarray) -> bool:
    return all(x.dtype == xs[0].dtype for x in xs)


_ARITH = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}


@_fold(*_ARITH)
def _arith(ctx, attrs, ins):
    a, b = ins
    if not _same_dtype(a, b) or a.dtype.kind not in "iuf" or "broadcast" in attrs:
        return None
    with np.errstate(all="ignore"):
        return [_ARITH[ctx.node.op_type](a, b).astype(a.dtype)]


@_fold("Div")
def _div(ctx, attrs, ins):
    a, b = ins
    if not _same_dtype(a, b) or a.dtype.kind not in "iuf" or "broadcast" in attrs:
        return None
    if a.dtype.kind == "f":
        with np.errstate(all="ignore"):
            return [np.true_divide(a, b).astype(a.dtype)]
    if np.any(b == 0):
        return None
    q = np.floor_divide(a, b)
    q = q + ((q < 0) & (np.remainder(a, b) != 0))  # truncation toward zero
    return [q.astype(a.dtype)]


_COMPARE = {"Equal": np.equal, "Less": np.less, "Greater": np.greater, "LessOrEqual": np.less_equal,
            "GreaterOrEqual": np.greater_equal}


@_fold(*_COMPARE)
def _compare(ctx, attrs, ins):
    a, b = ins
    if not _same_dtype(a, b):
        return None
    return [np.asarray(_COMPARE[ctx.node.op_type](a, b))]


@_fold("Not")
def _not(ctx, attrs, ins):
    return [np.logical_not(ins[0])] if ins[0].dtype == bool else None


@_fold("And", "Or")
def _logic(ctx, attrs, ins):
    a, b = ins
    if a.dtype != bool or b.dtype != bool:
        return None
    return [np.logical_and(a, b) if ctx.node.op_type == "And" else np.logical_or(a, b)]


@_fold("Neg", "Abs")
def _neg_abs(ctx, attrs, ins):
    x = ins[0]
    if x.dtype.kind not in "if":
        return None
    return [(np.negative(x) if ctx.node.op_type == "Neg" else np.abs(x)).astype(x.dtype)]


@_fold("Floor", "Ceil")
def _round(ctx, attrs, ins):
    x = ins[0]
    if x.dtype.kind != "f":
        return None
    return [(np.floor(x) if ctx.node.op_type == "Floor" else np.ceil(x)).astype(x.dtype)]


@_fold("Where")
def _where(ctx, attrs, ins):
    c, x, y = ins
    if c.dtype != bool or not _same_dtype(x, y):
        return None
    return [np.where(c, x, y).astype(x.dtype)]


@_fold("Max", "Min")
def _variadic(ctx, attrs, ins):
    if not ins or any(x is None for x in ins) or not _same_dtype(*ins) or ins[0].dtype.kind not in "iuf":
        return None
    fn = np.maximum if ctx.node.op_type == "Max" else np.minimum
    out = ins[0]
    for x in ins[1:]:
        out = fn(out, x)
    return [np.asarray(out).astype(ins[0].dtype)]


@_fold("Cast")
def _cast(ctx, attrs, ins):
    from ..loader import np_dtype

    x = ins[0]
    try:
        to = np_dtype(int(attrs["to"]))
    except Exception:  # noqa: BLE001 - types NumPy cannot hold: the reference evaluator knows them
        return None
    if x.dtype.kind not in "biuf" or to.kind not in "biuf" or (x.dtype.kind == "f" and to.kind in "iu"
                                                               and not np.all(np.isfinite(x))):
        return None
    return [x.astype(to)]


@_fold("Concat")
def _concat(ctx, attrs, ins):
    xs = [x for x in ins if x is not None]
    if not xs or "axis" not in attrs or not _same_dtype(*xs):
        return None
    return [np.concatenate(xs, axis=int(attrs["axis"]))]


def _axes(ctx, attrs, ins, since: int) -> list[int] | None:
    if ctx.opset >= since:
        return ints(ins[1]) if len(ins) > 1 and ins[1] is not None else None
    return [int(a) for a in attrs["axes"]] if "axes" in attrs else None


@_fold("Unsqueeze")
def _unsqueeze(ctx, attrs, ins):
    axes = _axes(ctx, attrs, ins, 13)
    if axes is None:
        return None
    rank = ins[0].ndim + len(axes)
    axes = sorted(a + rank if a < 0 else a for a in axes)
    if len(set(axes)) != len(axes) or any(not 0 <= a < rank for a in axes):
        return None
    return [np.expand_dims(ins[0], tuple(axes))]


@_fold("Squeeze")
def _squeeze(ctx, attrs, ins):
    x = ins[0]
    axes = _axes(ctx, attrs, ins, 13)
    if axes is None:
        return [np.squeeze(x)]
    axes = [a + x.ndim if a < 0 else a for a in axes]
    if any(not 0 <= a < x.ndim or x.shape[a] != 1 for a in axes):
        return None
    return [np.squeeze(x, tuple(axes))]


@_fold("Gather")
def _gather(ctx, attrs, ins):
    data, idx = ins
    axis = int(attrs.get("axis", 0))
    if idx.dtype.kind not in "iu" or not -data.ndim <= axis < data.ndim:
        return None
    axis = axis + data.ndim if axis < 0 else axis
    n = data.shape[axis]
    if np.any(idx < -n) or np.any(idx >= n):
        return None
    return [np.take(data, np.where(idx < 0, idx + n, idx), axis=axis)]


@_fold("Slice")
def _slice(ctx, attrs, ins):
    x = ins[0]
    if ctx.opset < 10:
        starts, ends = [int(v) for v in attrs["starts"]], [int(v) for v in attrs["ends"]]
        axes = [int(a) for a in attrs["axes"]] if "axes" in attrs else list(range(len(starts)))
        steps = [1] * len(starts)
    else:
        starts, ends = ints(ins[1]), ints(ins[2])
        axes = ints(ins[3]) if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
        steps = ints(ins[4]) if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps) or 0 in steps:
        return None
    axes = [a + x.ndim if a < 0 else a for a in axes]
    if any(not 0 <= a < x.ndim for a in axes) or len(set(axes)) != len(axes):
        return None
    index = []
    for start, step, count in slice_params(x.shape, starts, ends, axes, steps):
        stop = start + step * count
        index.append(slice(start, stop if stop >= 0 else None, step) if count else slice(0, 0))
    return [np.ascontiguousarray(x[tuple(index)])]


@_fold("Reshape")
def _reshape(ctx, attrs, ins):
    if ctx.opset < 5:
        return None
    x, shape = ins[0], ints(ins[1])
    allowzero = bool(attrs.get("allowzero", 0))
    target = [x.shape[k] if s == 0 and not allowzero and k < x.ndim else s for k, s in enumerate(shape)]
    try:
        return [x.reshape(target)]
    except ValueError:
        return None


@_fold("Expand")
def _expand(ctx, attrs, ins):
    x, shape = ins[0], ints(ins[1])
    try:
        out = np.broadcast_shapes(x.shape, tuple(shape))
    except ValueError:
        return None
    return [np.ascontiguousarray(np.broadcast_to(x, out))]


@_fold("Range")
def _range(ctx, attrs, ins):
    if not _same_dtype(*ins) or ins[0].dtype.kind not in "iuf" or any(x.size != 1 for x in ins):
        return None
    start, limit, delta = (x.reshape(-1)[0] for x in ins)
    if delta == 0:
        return None
    count = max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)
    return [(start + np.arange(count, dtype=ins[0].dtype) * delta).astype(ins[0].dtype)]


@_fold("Transpose")
def _transpose(ctx, attrs, ins):
    perm = attrs.get("perm")
    return [np.ascontiguousarray(np.transpose(ins[0], None if perm is None else [int(p) for p in perm]))]


@_fold("Tile")
def _tile(ctx, attrs, ins):
    if ctx.opset < 6:  # Tile-1 (tiles, axis): its converter
        return None
    reps = ints(ins[1])
    if len(reps) != ins[0].ndim or any(r < 0 for r in reps):
        return None
    return [np.tile(ins[0], reps)]


_REDUCE = {"ReduceProd": np.prod, "ReduceSum": np.sum, "ReduceMax": np.max, "ReduceMin": np.min}


@_fold(*_REDUCE)
def _reduce(ctx, attrs, ins):
    x = ins[0]
    since = 13 if ctx.node.op_type == "ReduceSum" else 18
    axes = _axes(ctx, attrs, ins, since)
    if x.dtype.kind not in "iuf" or x.size == 0:
        return None
    if not axes:
        if attrs.get("noop_with_empty_axes", 0):
            return [x]
        axes = list(range(x.ndim))
    keep = bool(attrs.get("keepdims", 1))
    return [np.asarray(_REDUCE[ctx.node.op_type](x, axis=tuple(axes), keepdims=keep)).astype(x.dtype)]

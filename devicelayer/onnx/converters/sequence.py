"""Sequences and optionals: a sequence is a list of tensors whose length is known when the graph is specialised
(its elements graph Values or constants), an empty optional is None.  SequenceMap inlines its body per element.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import GraphError, UnsupportedOp
from .base import converter, ints, reshape
from .control import inline


def _seq(ctx: Any, i: int, what: str) -> list[Any]:
    x = ctx.raw(i)
    if not isinstance(x, list):
        raise GraphError(f"{what} (input {i}) must be a sequence, got "
                         f"{'an empty optional' if x is None else 'a tensor'}")
    return x


def _position(ctx: Any, i: int, length: int, what: str, end_ok: bool) -> int:
    """A position input as a non-negative index (negative ones count from the end)."""
    p = ctx.need_const(i, what)
    if p.size != 1:
        raise GraphError(f"{what} must be a scalar, got shape {p.shape}")
    pos = int(p.reshape(-1)[0])
    top = length if end_ok else length - 1
    if not -length <= pos <= top:
        raise GraphError(f"{what} {pos} is out of range for a sequence of {length}")
    return pos + length if pos < 0 else pos


@converter("SequenceEmpty")
def _sequence_empty(ctx, attrs):
    return [[]]


@converter("SequenceConstruct")
def _sequence_construct(ctx, attrs):
    return [[ctx.raw(i) for i in range(len(ctx.node.input)) if ctx.has(i)]]


@converter("SequenceLength")
def _sequence_length(ctx, attrs):
    return [np.array(len(_seq(ctx, 0, "SequenceLength's input")), np.int64)]


@converter("SequenceAt")
def _sequence_at(ctx, attrs):
    seq = _seq(ctx, 0, "SequenceAt's input")
    return [seq[_position(ctx, 1, len(seq), "SequenceAt's position", False)]]


@converter("SequenceInsert")
def _sequence_insert(ctx, attrs):
    seq = list(_seq(ctx, 0, "SequenceInsert's input"))
    pos = _position(ctx, 2, len(seq), "SequenceInsert's position", True) if ctx.has(2) else len(seq)
    seq.insert(pos, ctx.raw(1))
    return [seq]


@converter("SequenceErase")
def _sequence_erase(ctx, attrs):
    seq = list(_seq(ctx, 0, "SequenceErase's input"))
    if not seq:
        raise GraphError("SequenceErase of an empty sequence")
    pos = _position(ctx, 1, len(seq), "SequenceErase's position", False) if ctx.has(1) else len(seq) - 1
    del seq[pos]
    return [seq]


@converter("SplitToSequence")
def _split_to_sequence(ctx, attrs):
    x = ctx.raw(0)
    rank = len(x.shape)
    axis = int(attrs.get("axis", 0))
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        raise GraphError(f"SplitToSequence axis {attrs.get('axis', 0)} is out of range for rank {rank}")
    dim = x.shape[axis]
    split = ctx.need_const(1, "the split sizes") if ctx.has(1) else None
    keep = True
    if split is None:
        sizes = [1] * dim
        keep = bool(attrs.get("keepdims", 1))
    elif split.ndim == 0:
        step = int(split)
        if step <= 0:
            raise GraphError(f"SplitToSequence split {step} must be positive")
        sizes = [step] * (dim // step) + ([dim % step] if dim % step else [])
    else:
        sizes = ints(split)
        if sum(sizes) != dim or any(s < 0 for s in sizes):
            raise GraphError(f"SplitToSequence sizes {sizes} do not add up to dimension {dim}")
    if not sizes:
        return [[]]
    parts = ctx.add("split", [x], axis=axis, split=tuple(sizes)) if len(sizes) > 1 else [x]
    if not keep:
        parts = [reshape(ctx, p, tuple(s for k, s in enumerate(p.shape) if k != axis), f"squeeze{k}")
                 for k, p in enumerate(parts)]
    return [list(parts)]


@converter("ConcatFromSequence")
def _concat_from_sequence(ctx, attrs):
    seq = _seq(ctx, 0, "ConcatFromSequence's input")
    if not seq:
        raise GraphError("ConcatFromSequence of an empty sequence")
    axis = int(attrs["axis"])
    new_axis = bool(attrs.get("new_axis", 0))
    parts = seq
    if new_axis:
        rank = len(seq[0].shape) + 1
        a = axis + rank if axis < 0 else axis
        parts = [reshape(ctx, p, tuple(p.shape[:a]) + (1,) + tuple(p.shape[a:]), f"unsqueeze{k}")
                 for k, p in enumerate(seq)]
        axis = a
    if len(parts) == 1:
        return [parts[0]]
    if all(isinstance(p, np.ndarray) for p in parts):
        return [np.concatenate(parts, axis=axis)]
    return [ctx.op("concat", parts, axis=axis)]


@converter("SequenceMap")
def _sequence_map(ctx, attrs):
    body = attrs["body"]
    seqs = {i: ctx.raw(i) for i in range(len(ctx.node.input)) if ctx.has(i) and isinstance(ctx.raw(i), list)}
    if 0 not in seqs:
        raise GraphError("SequenceMap's first input must be a sequence")
    n = len(seqs[0])
    if any(len(s) != n for s in seqs.values()):
        raise GraphError(f"SequenceMap's sequences differ in length: {[len(s) for s in seqs.values()]}")
    results: list[list[Any]] = [[] for _ in body.output]
    for k in range(n):
        bound = {}
        for i, formal in enumerate(body.input):
            x = ctx.raw(i)
            bound[formal.name] = x[k] if i in seqs else x
        for acc, y in zip(results, inline(ctx, body, f"elem{k}", bound)):
            acc.append(y)
    return results


# -- optionals -------------------------------------------------------------------------------------------------------
@converter("Optional")
def _optional(ctx, attrs):
    return [ctx.raw(0) if ctx.has(0) else None]


@converter("OptionalHasElement")
def _optional_has_element(ctx, attrs):
    return [np.array(ctx.has(0) and ctx.raw(0) is not None)]


@converter("OptionalGetElement")
def _optional_get_element(ctx, attrs):
    x = ctx.raw(0)
    if x is None:
        raise UnsupportedOp("OptionalGetElement of an empty optional")
    return [x]

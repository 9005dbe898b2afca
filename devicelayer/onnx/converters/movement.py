"""Data movement: Concat, Split, Slice, Pad, Transpose, Reshape, Flatten, Squeeze/Unsqueeze, Gather,
DepthToSpace/SpaceToDepth, Expand, Tile."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import GraphError, UnsupportedOp
from .base import converter, pick, ints


# -- movement ------------------------------------------------------------------------------------------------------
@converter("Concat")
def _concat(ctx, attrs):
    if "axis" not in attrs and ctx.opset < 4:
        attrs = {**attrs, "axis": 1}
    xs = [ctx.raw(i) for i in range(len(ctx.node.input)) if ctx.has(i)]
    return [ctx.op("concat", xs, axis=int(attrs["axis"]))]


@converter("Split")
def _split(ctx, attrs):
    x = ctx.raw(0)
    axis = int(attrs.get("axis", 0))
    n_out = len(ctx.node.output)
    if ctx.opset >= 13:
        sizes = ctx.need_const(1, "split sizes")
        sizes = None if sizes is None else ints(sizes)
    else:
        sizes = attrs.get("split")
        if sizes is None and ctx.has(1):  # opset 1: split as a second input
            sizes = ints(ctx.need_const(1, "split sizes"))
    if sizes:
        outs = ctx.add("split", [x], axis=axis, split=tuple(sizes))
    elif "num_outputs" in attrs:
        outs = ctx.add("split", [x], axis=axis, num_outputs=int(attrs["num_outputs"]))
    else:
        dim = x.shape[axis]
        if dim % n_out:
            raise UnsupportedOp(f"Split of {dim} into {n_out} equal parts")
        outs = ctx.add("split", [x], axis=axis, split=(dim // n_out,) * n_out)
    return outs


@converter("Slice")
def _slice(ctx, attrs):
    x = ctx.raw(0)
    if ctx.opset < 10:
        starts, ends = ints(attrs["starts"]), ints(attrs["ends"])
        axes = ints(attrs["axes"]) if "axes" in attrs else list(range(len(starts)))
        steps = [1] * len(starts)
    else:
        starts, ends = ints(ctx.need_const(1, "starts")), ints(ctx.need_const(2, "ends"))
        axes = ctx.need_const(3, "axes")
        axes = list(range(len(starts))) if axes is None else ints(axes)
        steps = ctx.need_const(4, "steps")
        steps = [1] * len(starts) if steps is None else ints(steps)
    big = 2**31 - 1  # clamp INT64_MAX/MIN sentinels to what every kernel index holds
    starts = [max(min(s, big), -big) for s in starts]
    ends = [max(min(e, big), -big) for e in ends]
    return [ctx.op("slice", [x], starts=tuple(starts), ends=tuple(ends), axes=tuple(axes), steps=tuple(steps))]


@converter("Pad")
def _pad(ctx, attrs):
    x = ctx.raw(0)
    mode = attrs.get("mode", "constant")
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise UnsupportedOp(f"Pad mode {mode!r}")
    kw: dict[str, Any] = {"mode": mode}
    if ctx.opset < 11:
        pads = attrs.get("pads", attrs.get("paddings"))
        kw["pads"] = tuple(ints(pads))
        kw["value"] = float(attrs.get("value", 0.0))
    else:
        kw["pads"] = tuple(ints(ctx.need_const(1, "pads")))
        value = ctx.need_const(2, "constant_value")
        if value is not None and value.size:
            kw["value"] = value.reshape(-1)[0].item()
        axes = ctx.need_const(3, "axes")
        if axes is not None:
            kw["axes"] = tuple(ints(axes))
    if not any(kw["pads"]):
        return [x]
    return [ctx.op("pad", [x], **kw)]


@converter("Transpose")
def _transpose(ctx, attrs):
    x = ctx.raw(0)
    kw = {"perm": tuple(int(p) for p in attrs["perm"])} if "perm" in attrs else {}
    return [ctx.op("transpose", [x], **kw)]


@converter("Reshape")
def _reshape_node(ctx, attrs):
    x = ctx.raw(0)
    if ctx.opset < 5:
        shape = ints(attrs["shape"])
    else:
        shape = ints(ctx.need_const(1, "the target shape"))
    return [ctx.op("reshape", [x], shape=tuple(shape), **pick(attrs, "allowzero"))]


@converter("Flatten")
def _flatten(ctx, attrs):
    return [ctx.op("flatten", [ctx.raw(0)], axis=int(attrs.get("axis", 1)))]


@converter("Squeeze", "Unsqueeze")
def _squeeze(ctx, attrs):
    op = ctx.node.op_type.lower()
    x = ctx.raw(0)
    if ctx.opset >= 13:
        axes = ctx.need_const(1, "axes")
        axes = None if axes is None else tuple(ints(axes))
    else:
        axes = attrs.get("axes")
        axes = None if axes is None else tuple(int(a) for a in axes)
    kw = {} if axes is None else {"axes": axes}
    return [ctx.op(op, [x], **kw)]


@converter("Gather")
def _gather(ctx, attrs):
    data, idx = ctx.raw(0), ctx.raw(1)
    if isinstance(idx, np.ndarray):
        dim = data.shape[int(attrs.get("axis", 0))]
        idx = np.where(idx < 0, idx + dim, idx).astype(idx.dtype)
    return [ctx.op("gather", [data, idx], axis=int(attrs.get("axis", 0)))]


@converter("DepthToSpace")
def _depth_to_space(ctx, attrs):
    return [ctx.op("depth_to_space", [ctx.raw(0)], **pick(attrs, "blocksize", "mode"))]


@converter("SpaceToDepth")
def _space_to_depth(ctx, attrs):
    return [ctx.op("space_to_depth", [ctx.raw(0)], **pick(attrs, "blocksize", "mode"))]


@converter("Expand")
def _expand(ctx, attrs):
    x = ctx.raw(0)
    shape = ints(ctx.need_const(1, "the target shape"))
    out = tuple(int(s) for s in np.broadcast_shapes(tuple(x.shape), tuple(shape)))
    if out == tuple(x.shape):
        return [x]
    if x.dtype.kind == "b":
        raise UnsupportedOp("Expand of a bool tensor")
    return [ctx.op("add", [x, np.zeros(out, x.dtype)])]


@converter("Tile")
def _tile(ctx, attrs):
    x = ctx.raw(0)
    reps = ints(ctx.need_const(1, "repeats"))
    if ctx.opset < 6:  # Tile-1: inputs (input, tiles, axis), scalars: ``tiles`` copies along ``axis``
        axis = ints(ctx.need_const(2, "axis")) if ctx.has(2) else []
        if len(reps) != 1 or len(axis) != 1 or not -len(x.shape) <= axis[0] < len(x.shape):
            raise GraphError(f"Tile of opset {ctx.opset} takes one tiles count and one axis of the rank-"
                             f"{len(x.shape)} input, got tiles {reps} and axis {axis}")
        reps, at = [1] * len(x.shape), axis[0] % len(x.shape)
        reps[at] = ints(ctx.need_const(1, "tiles"))[0]
    y = x
    for axis, r in enumerate(reps):
        if r != 1:
            y = ctx.op("concat", [y] * r, f"axis{axis}", axis=axis)
    return [y]


@converter("BitCast")
def _bitcast(ctx, attrs):
    from ..loader import np_dtype

    x = ctx.raw(0)
    to = np_dtype(int(attrs["to"]))
    if isinstance(x, np.ndarray):
        return [x.view(to)] if x.dtype.itemsize == to.itemsize else [ctx.op("bitcast", [x], to=to)]
    return [ctx.op("bitcast", [x], to=to)]

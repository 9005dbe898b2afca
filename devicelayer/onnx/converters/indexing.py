"""Indexing by tensors: GatherElements, GatherND, Scatter, ScatterElements, ScatterND, TensorScatter,
ReverseSequence, CenterCropPad (slice and pad), and the ops whose output shape depends on data (Compress, NonZero,
Unique), computed with ``Context.on_host``."""

from __future__ import annotations

import numpy as np

from ...errors import InvalidArgument
from .base import converter, ints, pick, reshape


@converter("GatherElements")
def _gather_elements(ctx, attrs):
    return [ctx.op("gather_elements", [ctx.raw(0), ctx.raw(1)], **pick(attrs, "axis"))]


@converter("GatherND")
def _gather_nd(ctx, attrs):
    return [ctx.op("gather_nd", [ctx.raw(0), ctx.raw(1)], **pick(attrs, "batch_dims"))]


@converter("Scatter", "ScatterElements")
def _scatter_elements(ctx, attrs):
    return [ctx.op("scatter_elements", [ctx.raw(0), ctx.raw(1), ctx.raw(2)], **pick(attrs, "axis", "reduction"))]


@converter("ScatterND")
def _scatter_nd(ctx, attrs):
    return [ctx.op("scatter_nd", [ctx.raw(0), ctx.raw(1), ctx.raw(2)], **pick(attrs, "reduction"))]


@converter("TensorScatter")
def _tensor_scatter(ctx, attrs):
    ins = [ctx.raw(0), ctx.raw(1)] + ([ctx.raw(2)] if ctx.has(2) else [])
    return [ctx.op("tensor_scatter", ins, **pick(attrs, "axis", "mode"))]


@converter("ReverseSequence")
def _reverse_sequence(ctx, attrs):
    return [ctx.op("reverse_sequence", [ctx.raw(0), ctx.raw(1)], **pick(attrs, "batch_axis", "time_axis"))]


@converter("CenterCropPad")
def _center_crop_pad(ctx, attrs):
    x = ctx.raw(0)
    rank = len(x.shape)
    shape = ints(ctx.need_const(1, "the target shape"))
    axes = [a + rank if a < 0 else a for a in ints(attrs.get("axes", range(rank)))]
    if len(axes) != len(shape) or any(not 0 <= a < rank for a in axes):
        raise InvalidArgument(f"CenterCropPad: shape {shape} does not match axes {axes} of a rank-{rank} input")
    starts, ends, crop_axes, pads = [], [], [], [0] * (2 * rank)
    for a, want in zip(axes, shape):
        dim = x.shape[a]
        if want < dim:  # crop: the extra element of an odd difference is cut at the end
            starts.append((dim - want) // 2)
            ends.append((dim - want) // 2 + want)
            crop_axes.append(a)
        elif want > dim:  # pad: the extra element of an odd difference goes at the end
            pads[a] = (want - dim) // 2
            pads[rank + a] = want - dim - pads[a]
    y = x
    if crop_axes:
        y = ctx.op("slice", [y], "crop", starts=tuple(starts), ends=tuple(ends), axes=tuple(crop_axes))
    if any(pads):
        y = ctx.op("pad", [y], "pad", pads=tuple(pads))
    return [y]


# -- output shapes that depend on data: computed on the host --------------------------------------------------------
def compress_indices(condition: np.ndarray, dim: int) -> np.ndarray:
    """The positions Compress keeps along an axis of ``dim``: where ``condition`` (1-D, maybe shorter) is true;
    InvalidArgument when it keeps a position beyond the axis."""
    keep = np.nonzero(np.asarray(condition).reshape(-1))[0].astype(np.int64)
    if keep.size and keep[-1] >= dim:
        raise InvalidArgument(f"Compress: the condition keeps position {int(keep[-1])}, beyond the axis of "
                              f"size {dim}")
    return keep


def compress(x: np.ndarray, condition: np.ndarray, axis: int | None) -> np.ndarray:
    """ONNX Compress: the slices of ``x`` along ``axis`` (None: of the flattened x) where ``condition`` is true."""
    if axis is None:
        x, axis = np.asarray(x).reshape(-1), 0
    return np.take(x, compress_indices(condition, x.shape[axis]), axis=axis)


def nonzero(x: np.ndarray) -> np.ndarray:
    """ONNX NonZero: the indices of the non-zero elements, one row per dim (int64, shape (rank, count))."""
    x = np.asarray(x)
    if x.ndim == 0:
        return np.zeros((0, int(x != 0)), np.int64)
    return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


def unique(x: np.ndarray, axis: int | None, sorted_: bool) -> list[np.ndarray]:
    """ONNX Unique: the unique values (slices along ``axis``; None: of the flattened tensor), sorted or in order of
    first occurrence, with the index of each one's first occurrence, the inverse indices and the counts."""
    values, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True,
                                               axis=axis)
    inverse = inverse.reshape(-1)
    if not sorted_:
        order = np.argsort(first, kind="stable")
        values = np.take(values, order, axis=0 if axis is None else axis)
        first, counts = first[order], counts[order]
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        inverse = rank[inverse]
    return [values, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)]


@converter("Compress")
def _compress(ctx, attrs):
    x, condition = ctx.raw(0), ctx.raw(1)
    axis = attrs.get("axis")
    if axis is not None:
        axis = int(axis) + len(x.shape) if int(axis) < 0 else int(axis)
        if not 0 <= axis < len(x.shape):
            raise InvalidArgument(f"Compress: axis {attrs['axis']} is out of range for a rank-{len(x.shape)} input")
    if not isinstance(condition, np.ndarray):  # the output shape depends on the condition's values
        return ctx.on_host(lambda arrays: [compress(arrays[0], arrays[1], axis)], [x, condition], "Compress")
    if axis is None:  # a constant condition: a gather on the device at the positions it keeps
        x, axis = reshape(ctx, x, (int(np.prod(x.shape)),), "flat"), 0
    return [ctx.op("gather", [x, compress_indices(condition, x.shape[axis])], axis=axis)]


@converter("NonZero")
def _nonzero(ctx, attrs):
    return ctx.on_host(lambda arrays: [nonzero(arrays[0])], [ctx.raw(0)], "NonZero")


@converter("Unique")
def _unique(ctx, attrs):
    axis = attrs.get("axis")
    x = ctx.raw(0)
    if axis is not None:
        axis = int(axis) + len(x.shape) if int(axis) < 0 else int(axis)
        if not 0 <= axis < len(x.shape):
            raise InvalidArgument(f"Unique: axis {attrs['axis']} is out of range for a rank-{len(x.shape)} input")
    return ctx.on_host(lambda arrays: unique(arrays[0], axis, bool(attrs.get("sorted", 1))), [x], "Unique")

"""ONNX Resize and Upsample, composed of library ops.

Resizing is separable: each resized axis is a constant linear map of the
input's rows along it (plus a constant where tf_crop_and_resize extrapolates).
The map is computed at load time in float64, following ONNX's definition:
the coordinate transformation, nearest rounding, the cubic coefficient,
exclude_outside, antialias and keep_aspect_ratio_policy.  It runs as a gather
of the source rows (nearest), a weighted sum of two or four gathers (linear,
cubic), or, where a row mixes more inputs (antialiased downsampling), a
product with the interpolation matrix.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import GraphError, UnsupportedOp
from .base import Tensor, cast, converter, ints, reshape
from ..loader import Context

COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "tf_crop_and_resize", "tf_half_pixel_for_nn")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")  # and "simple", before opset 11
#: the most source rows one output row may mix before the axis runs as a matrix product instead of gathers
MAX_TAPS = 4


@dataclass
class AxisMap:
    """One resized axis: ``y[j] = sum_t weight[j, t] * x[index[j, t]] + offset[j]``."""

    index: np.ndarray  # (out, taps) int64
    weight: np.ndarray  # (out, taps) float64
    offset: np.ndarray  # (out,) float64: the extrapolation value where the source lies outside the input
    matrix: np.ndarray  # (out, in) float64: the same map, dense

    @property
    def gathers_only(self) -> bool:
        """Each output row copies one input row (nearest, or an identity)."""
        return self.index.shape[1] == 1 and bool(np.all(self.weight == 1)) and not self.offset.any()

    @property
    def identity(self) -> bool:
        """The map changes nothing."""
        n_out, n_in = self.matrix.shape
        return n_out == n_in and self.gathers_only and bool(np.all(self.index[:, 0] == np.arange(n_out)))


@dataclass
class Settings:
    """The attributes that decide the interpolation (legacy Upsample and Resize-10 included)."""

    mode: str = "nearest"
    coordinates: str = "half_pixel"
    nearest: str = "round_prefer_floor"
    cubic_a: float = -0.75
    exclude_outside: bool = False
    extrapolation: float = 0.0
    antialias: bool = False


# -- the per-axis map -------------------------------------------------------------------------------------------------
_F = np.float32


def source_coordinates(s: Settings, n_out: int, n_in: int, scale: float,
                       roi: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    """Source coordinate of every output row, and which rows tf_crop_and_resize sends outside the input.

    Computed in float32 in the order ONNX Runtime computes them, so that nearest rounding breaks the same ties;
    lengths are the whole output length (``n_out``), as in ONNX Runtime and PyTorch.
    """
    y = np.arange(n_out, dtype=_F)
    scale32, length_in, length_out = _F(scale), _F(n_in), _F(n_out)
    half = _F(0.5)
    outside = np.zeros(n_out, dtype=bool)
    mode = s.coordinates
    with np.errstate(divide="ignore", invalid="ignore"):
        if mode == "align_corners":
            x = np.zeros(n_out, _F) if n_out == 1 else y * (length_in - _F(1)) / (length_out - _F(1))
        elif mode == "asymmetric":
            x = y / scale32
        elif mode == "tf_crop_and_resize":
            start, end = _F(roi[0]), _F(roi[1])
            if n_out > 1:
                x = start * (length_in - _F(1)) + (y * (end - start) * (length_in - _F(1))) / (length_out - _F(1))
            else:
                x = np.full(n_out, 0.5 * (float(start) + float(end)) * (n_in - 1), dtype=_F)
            outside = (x < 0) | (x > length_in - _F(1))
        elif mode == "pytorch_half_pixel":
            x = (y + half) / scale32 - half if n_out > 1 else np.zeros(n_out, _F)
        elif mode == "half_pixel":
            x = (y + half) / scale32 - half
        elif mode == "tf_half_pixel_for_nn":  # opsets 11 and 12
            x = (y + half) / scale32
        else:  # half_pixel_symmetric
            adjustment = length_out / (scale32 * length_in)
            offset = (length_in / _F(2)) * (_F(1) - adjustment)
            x = (float(offset) + (y.astype(np.float64) + 0.5) / float(scale32) - 0.5).astype(_F)
    return x.astype(_F), outside


def _nearest_rows(s: Settings, x: np.ndarray, scale: float) -> np.ndarray:
    """The input row each output row copies (before clamping), rounding the coordinate as the mode says."""
    mode = s.nearest
    if mode == "simple":  # Upsample and Resize-10: truncate, or round up when shrinking
        return np.ceil(x) if scale < 1 else np.trunc(x)
    away = np.sign(x) * np.floor(np.abs(x) + _F(0.5))  # round half away from zero
    if mode == "round_prefer_floor":
        return np.where(x == np.trunc(x) + _F(0.5), np.floor(x), away)
    if mode == "round_prefer_ceil":
        return away
    return np.floor(x) if mode == "floor" else np.ceil(x)


def _coefficients(s: Settings, ratio: float, scale: float) -> np.ndarray:
    """Linear or cubic weights of the taps around a source coordinate ``ratio`` past its left neighbour."""
    if s.mode == "linear":
        if not s.antialias:
            return np.array([1 - ratio, ratio])
        scale = min(scale, 1.0)
        start = int(np.floor(-1 / scale) + 1)
        args = (np.arange(start, 2 - start) - ratio) * scale
        c = np.clip(1 - np.abs(args), 0, 1)
        return c / c.sum()
    a = s.cubic_a
    if not s.antialias:
        t = ratio
        return np.array([((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
                         ((a + 2) * t - (a + 3)) * t * t + 1,
                         ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1,
                         ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a])
    scale = min(scale, 1.0)
    i_start = int(np.floor(-2 / scale) + 1)
    d = np.abs(scale * (np.arange(i_start, 2 - i_start) - ratio))
    c = np.where(d <= 1, (a + 2) * d ** 3 - (a + 3) * d ** 2 + 1,
                 np.where(d < 2, a * d ** 3 - 5 * a * d ** 2 + 8 * a * d - 4 * a, 0.0))
    return c / c.sum()


def axis_map(s: Settings, n_in: int, n_out: int, scale: float, roi: tuple[float, float] = (0.0, 1.0)) -> AxisMap:
    """The linear map one axis of length ``n_in`` goes through to become ``n_out`` long."""
    x32, outside = source_coordinates(s, n_out, n_in, scale, roi)
    if s.mode == "nearest":
        rows = np.clip(_nearest_rows(s, x32, scale), 0, n_in - 1).astype(np.int64)[:, None]
        coeffs = np.ones((n_out, 1))
    else:
        x = x32.astype(np.float64)
        # the row before the coordinate (the one before that where it falls on a row) and the distance past it
        left = np.floor(x)
        left = np.where(x == left, left - 1, left)
        ratios = x - left  # in (0, 1]
        coeffs = np.stack([_coefficients(s, float(r), scale) for r in ratios])
        n = coeffs.shape[1]  # even: the taps straddle the coordinate, half on each side
        rows = (left.astype(np.int64) - n // 2 + 1)[:, None] + np.arange(n)[None, :]
        if s.exclude_outside:
            coeffs = np.where((rows < 0) | (rows >= n_in), 0.0, coeffs)
            total = coeffs.sum(axis=1, keepdims=True)
            coeffs = coeffs / np.where(total == 0, 1.0, total)
        rows = np.clip(rows, 0, n_in - 1)  # the edge rows stand for the rows past them
    coeffs[outside] = 0.0
    n = rows.shape[1]
    matrix = np.zeros((n_out, n_in))
    np.add.at(matrix, (np.repeat(np.arange(n_out), n), rows.reshape(-1)), coeffs.reshape(-1))
    offset = np.where(outside, s.extrapolation, 0.0)
    # the taps that carry weight, per row, padded with a zero weight on the row's last source
    nonzero = [np.flatnonzero(r) for r in matrix]
    taps = max(1, max(len(c) for c in nonzero))
    index = np.zeros((n_out, taps), dtype=np.int64)
    weight = np.zeros((n_out, taps))
    for j, cols in enumerate(nonzero):
        if len(cols):
            index[j, :len(cols)], index[j, len(cols):] = cols, cols[-1]
            weight[j, :len(cols)] = matrix[j, cols]
    return AxisMap(index, weight, offset, matrix)


# -- shapes and attributes ---------------------------------------------------------------------------------------------
def output_plan(shape: Sequence[int], scales: np.ndarray | None, sizes: np.ndarray | None,
                axes: Sequence[int], policy: str) -> tuple[list[int], list[float]]:
    """(output shape, scale per axis) from scales or sizes, in float32 as ONNX Runtime computes them."""
    rank = len(shape)
    out, scale = list(shape), [1.0] * rank
    if scales is not None:
        for a, v in zip(axes, scales.astype(_F)):
            if not v > 0 or not math.isfinite(v):
                raise GraphError(f"scales must be positive and finite, got {scales.tolist()}")
            scale[a], out[a] = float(v), int(v * _F(shape[a]))
        return out, scale
    for a, v in zip(axes, np.asarray(sizes).tolist()):
        if v <= 0:
            raise GraphError(f"sizes must be positive, got {np.asarray(sizes).tolist()}")
        scale[a], out[a] = float(_F(v) / _F(shape[a])), int(v)
    if policy != "stretch":
        common = _F((min if policy == "not_larger" else max)(scale[a] for a in axes))
        for a in axes:
            scale[a], out[a] = float(common), int(np.floor(common * _F(shape[a]) + _F(0.5)))
    return out, scale


def _settings(ctx: Context, attrs: dict[str, Any], legacy: bool) -> Settings:
    mode = attrs.get("mode", "nearest")
    if ctx.node.op_type == "Upsample" and ctx.opset < 7:  # Upsample-1 (experimental): NEAREST or BILINEAR
        mode = mode.lower()
    if mode == "bilinear" and ctx.node.op_type == "Upsample":
        mode = "linear"
    if mode not in ("nearest", "linear", "cubic") or (legacy and mode == "cubic"):
        raise GraphError(f"mode {mode!r} is not one of nearest, linear{'' if legacy else ', cubic'}")
    if legacy:  # Upsample and Resize-10: source = output / scale; nearest truncates (rounds up when shrinking)
        return Settings(mode=mode, coordinates="asymmetric", nearest="simple")
    s = Settings(mode=mode, coordinates=attrs.get("coordinate_transformation_mode", "half_pixel"),
                 nearest=attrs.get("nearest_mode", "round_prefer_floor"),
                 cubic_a=float(attrs.get("cubic_coeff_a", -0.75)),
                 exclude_outside=bool(attrs.get("exclude_outside", 0)),
                 extrapolation=float(attrs.get("extrapolation_value", 0.0)),
                 antialias=bool(attrs.get("antialias", 0)))
    if s.coordinates not in COORDINATE_MODES:
        raise GraphError(f"coordinate_transformation_mode {s.coordinates!r} is not one of {list(COORDINATE_MODES)}")
    if s.nearest not in NEAREST_MODES:
        raise GraphError(f"nearest_mode {s.nearest!r} is not one of {list(NEAREST_MODES)}")
    if s.antialias and mode == "nearest":
        raise GraphError("antialias applies to linear and cubic modes, not nearest")
    return s


def _axes(attrs: dict[str, Any], rank: int) -> list[int]:
    axes = attrs.get("axes")
    if axes is None:
        return list(range(rank))
    out = [a + rank if a < 0 else a for a in (int(v) for v in axes)]
    if any(not 0 <= a < rank for a in out) or len(set(out)) != len(out):
        raise GraphError(f"axes {list(axes)} must be distinct axes of a rank-{rank} input")
    return out


def _inputs(ctx: Context, attrs: dict[str, Any], axes: list[int]) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """(roi, scales, sizes) as constants; exactly one of scales and sizes."""
    op = ctx.node.op_type
    if op == "Upsample" and ctx.opset < 7 and "scales" not in attrs:  # Upsample-1: NCHW, height and width scales
        if len(ctx.raw(0).shape) != 4:
            raise GraphError(f"Upsample of opset {ctx.opset} takes a 4-D NCHW input, got rank {len(ctx.raw(0).shape)}")
        return None, np.array([1.0, 1.0, float(attrs.get("height_scale", 1.0)),
                               float(attrs.get("width_scale", 1.0))]), None
    if op == "Upsample" and ctx.opset < 9:
        if "scales" not in attrs:
            raise GraphError("Upsample needs its scales attribute")
        return None, np.asarray(attrs["scales"], dtype=np.float64), None
    if op == "Upsample" or ctx.opset < 11:
        return None, ctx.need_const(1, "scales"), None
    roi = ctx.need_const(1, "roi")
    scales = ctx.need_const(2, "scales")
    sizes = ctx.need_const(3, "sizes")
    if scales is not None and scales.size == 0:
        scales = None
    if sizes is not None and sizes.size == 0:
        sizes = None
    if (scales is None) == (sizes is None):
        raise GraphError("exactly one of scales and sizes must be given")
    if roi is not None and roi.size == 0:
        roi = None
    if roi is not None and roi.size != 2 * len(axes):
        raise GraphError(f"roi has {roi.size} values; it needs 2 per resized axis ({2 * len(axes)})")
    return roi, scales, sizes


@converter("Resize", "Upsample")
def _resize(ctx: Context, attrs: dict[str, Any]) -> list[Tensor]:
    x = ctx.raw(0)
    shape, rank = tuple(x.shape), len(x.shape)
    legacy = ctx.node.op_type == "Upsample" or ctx.opset < 11
    s = _settings(ctx, attrs, legacy)
    axes = list(range(rank)) if legacy else _axes(attrs, rank)
    roi, scales, sizes = _inputs(ctx, attrs, axes)
    given = scales if scales is not None else sizes
    if given is None or given.size != len(axes):
        raise GraphError(f"{'scales' if scales is not None else 'sizes'} has "
                         f"{0 if given is None else given.size} values for {len(axes)} axes")
    if sizes is not None:
        sizes = np.asarray(ints(sizes), dtype=np.int64)
    policy = attrs.get("keep_aspect_ratio_policy", "stretch") if sizes is not None else "stretch"
    if policy not in ("stretch", "not_larger", "not_smaller"):
        raise GraphError(f"keep_aspect_ratio_policy {policy!r} is not one of stretch, not_larger, not_smaller")
    out_shape, scale = output_plan(shape, scales, sizes, axes, policy)
    if any(n <= 0 for n in out_shape):
        raise GraphError(f"the output shape {tuple(out_shape)} has an empty axis")
    if s.mode != "nearest" and not (x.dtype.kind == "f" and x.dtype.itemsize <= 4):
        raise UnsupportedOp(f"Resize mode={s.mode!r} of a {x.dtype} input (float32 and float16 only)")
    maps = []
    for i, a in enumerate(axes):
        window = (0.0, 1.0) if roi is None else (float(roi[i]), float(roi[len(axes) + i]))
        m = axis_map(s, shape[a], out_shape[a], scale[a], window)
        if not m.identity:
            maps.append((a, m))
    if not maps:
        return [x]
    narrow = x.dtype if s.mode != "nearest" and x.dtype != np.float32 else None
    y = cast(ctx, x, np.float32, "to_float") if narrow is not None else x
    for a, m in maps:
        y = _apply(ctx, y, a, m)
    return [cast(ctx, y, narrow, "") if narrow is not None else y]


def _apply(ctx: Context, x: Tensor, axis: int, m: AxisMap) -> Tensor:
    """``x`` with one axis mapped."""
    rank = len(x.shape)
    n_out = m.matrix.shape[0]
    if m.gathers_only:
        return ctx.op("gather", [x, m.index[:, 0]], f"axis{axis}", axis=axis)
    along = (n_out,) + (1,) * (rank - axis - 1)  # a per-row constant broadcast along the axis
    if m.index.shape[1] <= MAX_TAPS:
        y = None
        for t in range(m.index.shape[1]):
            rows = ctx.op("gather", [x, m.index[:, t]], f"axis{axis}_tap{t}", axis=axis)
            term = ctx.op("mul", [rows, m.weight[:, t].reshape(along).astype(x.dtype)], f"axis{axis}_weight{t}")
            y = term if y is None else ctx.op("add", [y, term], f"axis{axis}_sum{t}")
    else:
        y = _matrix_product(ctx, x, axis, m.matrix.astype(x.dtype))
    if m.offset.any():
        y = ctx.op("add", [y, m.offset.reshape(along).astype(x.dtype)], f"axis{axis}_extrapolated")
    return y


def _matrix_product(ctx: Context, x: Tensor, axis: int, matrix: np.ndarray) -> Tensor:
    shape = tuple(x.shape)
    before = int(np.prod(shape[:axis], dtype=np.int64))
    after = int(np.prod(shape[axis + 1:], dtype=np.int64))
    n_out, n_in = matrix.shape
    out_shape = shape[:axis] + (n_out,) + shape[axis + 1:]
    if after == 1:  # the last axis: rows times the transposed map
        y = ctx.op("matmul", [reshape(ctx, x, (before, n_in), f"axis{axis}_rows"),
                              np.ascontiguousarray(matrix.T)], f"axis{axis}_map")
    else:
        y = ctx.op("matmul", [matrix, reshape(ctx, x, (before, n_in, after), f"axis{axis}_rows")],
                   f"axis{axis}_map")
    return reshape(ctx, y, out_shape, f"axis{axis}_shape")

"""GridSample, AffineGrid, RoiAlign, DeformConv, Col2Im and Det."""

from __future__ import annotations

import numpy as np

from ...errors import InvalidArgument
from ..loader import Context
from .base import Tensor, converter, ints, pick, reshape


@converter("GridSample")
def _grid_sample(ctx, attrs):
    return [ctx.op("grid_sample", [ctx.raw(0), ctx.raw(1)], **pick(attrs, "mode", "padding_mode", "align_corners"))]


def base_grid(spatial: list[int], align_corners: bool, dtype: np.dtype) -> np.ndarray:
    """AffineGrid's homogeneous coordinates of every output position: (prod(spatial), r + 1) rows
    (x, y[, z], 1), x walking the last spatial axis, in [-1, 1] (pixel centres; the corners' with
    ``align_corners``)."""
    axes = []
    for n in spatial:
        if align_corners:
            axes.append(np.linspace(-1.0, 1.0, n) if n > 1 else np.full(n, -1.0))
        else:
            axes.append((2.0 * np.arange(n) + 1.0) / n - 1.0)
    mesh = np.meshgrid(*axes, indexing="ij")
    coords = [m.reshape(-1) for m in reversed(mesh)] + [np.ones(int(np.prod(spatial, dtype=np.int64)))]
    return np.stack(coords, axis=1).astype(dtype)


@converter("AffineGrid")
def _affine_grid(ctx, attrs):
    theta = ctx.raw(0)
    size = ints(ctx.need_const(1, "size"))
    if len(theta.shape) != 3 or len(size) not in (4, 5) or theta.shape[1:] != (len(size) - 2, len(size) - 1):
        raise InvalidArgument(f"AffineGrid: theta {tuple(theta.shape)} does not fit size {size} (needs (N, 2, 3) "
                              "with a 4-D size or (N, 3, 4) with a 5-D one)")
    if size[0] != theta.shape[0] or min(size) < 1:
        raise InvalidArgument(f"AffineGrid: size {size} must be positive with theta's batch {theta.shape[0]} first")
    spatial = size[2:]
    grid = base_grid(spatial, bool(attrs.get("align_corners", 0)), theta.dtype)  # (P, r + 1)
    theta_t = ctx.op("transpose", [theta], "theta_t", perm=(0, 2, 1))  # (N, r + 1, r)
    points = ctx.op("matmul", [grid, theta_t], "points")  # (N, P, r)
    return [reshape(ctx, points, (size[0], *spatial, len(spatial)), "grid")]


@converter("RoiAlign")
def _roi_align(ctx, attrs):
    kw = pick(attrs, "mode", "output_height", "output_width", "sampling_ratio", "spatial_scale",
              "coordinate_transformation_mode")
    if ctx.opset < 16:  # before opset 16 RoiAlign had no half-pixel shift
        kw["coordinate_transformation_mode"] = "output_half_pixel"
    return [ctx.op("roi_align", [ctx.raw(0), ctx.raw(1), ctx.raw(2)], **kw)]


@converter("DeformConv")
def _deform_conv(ctx, attrs):
    ins: list[Tensor] = [ctx.raw(0), ctx.raw(1), ctx.raw(2)]
    if ctx.has(3) or ctx.has(4):
        ins.append(ctx.raw(3) if ctx.has(3) else np.zeros(ctx.raw(1).shape[:1], ctx.raw(0).dtype))
    if ctx.has(4):
        ins.append(ctx.raw(4))
    return [ctx.op("deform_conv", ins, **pick(attrs, "dilations", "group", "kernel_shape", "offset_group", "pads",
                                               "strides"))]


@converter("Col2Im")
def _col2im(ctx, attrs):
    image = ints(ctx.need_const(1, "image_shape"))
    block = ints(ctx.need_const(2, "block_shape"))
    return [ctx.op("col2im", [ctx.raw(0)], image_shape=tuple(image), block_shape=tuple(block),
                   **pick(attrs, "dilations", "pads", "strides"))]


@converter("Det")
def _det(ctx: Context, attrs):
    return [ctx.op("det", [ctx.raw(0)])]


__all__ = ["base_grid"]

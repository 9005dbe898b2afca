"""Linear algebra beside the matrix products: ``diagonal`` (the diagonal over several axes, a strided copy:
Einsum's repeated labels) and ``det`` (ONNX Det, by LU factorisation with partial pivoting)."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ...dtypes import arithmetic, computes_as_float
from ..dialect import KernelSpec, Param, dialect_type
from ..op import Launch, Op, Plan, TensorType, groups_for, local_1d, register
from .movement import Movement, contiguous_strides, copy_launch, ints_attr, norm_axes, refuse_unknown


@register
class Diagonal(Movement):
    """diagonal(x, axes): the elements whose indices along ``axes`` (two or more axes of one size) agree, as
    one axis where the first of them was (the others removed); ``x[i, j, i]`` with axes (0, 2) is ``y[i, j]``."""

    name = "diagonal"

    def check(self, inputs, attrs):
        refuse_unknown(self, attrs, ["axes"])
        shape = inputs[0].shape
        axes = norm_axes(self, ints_attr(self, attrs, "axes", required=True), len(shape))
        if len(axes) < 2:
            raise self.error(f"needs two or more axes, got {list(axes)}")
        if len({shape[a] for a in axes}) != 1:
            raise self.error(f"axes {list(axes)} of {shape} differ in size")
        return {"axes": tuple(sorted(axes))}

    @staticmethod
    def _layout(shape: Sequence[int], axes: Sequence[int]) -> tuple[tuple[int, ...], list[int]]:
        """The output shape and, for each output axis, its element stride in x."""
        strides = contiguous_strides(shape)
        out_shape, walk = [], []
        for d, n in enumerate(shape):
            if d in axes[1:]:
                continue
            out_shape.append(n)
            walk.append(sum(strides[a] for a in axes) if d == axes[0] else strides[d])
        return tuple(out_shape), walk

    def infer(self, inputs, attrs):
        return [TensorType(self._layout(inputs[0].shape, attrs["axes"])[0], inputs[0].dtype)]

    def reference(self, inputs, attrs):
        x = np.ascontiguousarray(inputs[0])
        shape, walk = self._layout(x.shape, attrs["axes"])
        return [as_strided(x, shape, [w * x.itemsize for w in walk], writeable=False).copy()]

    def plan(self, inputs, outputs, attrs, info):
        shape, walk = self._layout(inputs[0].shape, attrs["axes"])
        launch = copy_launch(inputs[0].dtype, ("in", 0), ("out", 0), shape, walk, 0, contiguous_strides(shape), 0,
                             info, self.name)
        return Plan([launch] if launch is not None else [])


@register
class Det(Op):
    """det(x): determinants of the square matrices in x's last two axes (ONNX Det), by LU factorisation with
    partial pivoting; float16 factorises in float32."""

    name = "det"
    kernel_dtypes = frozenset({"float32", "float16", "float64"})

    def check(self, inputs, attrs):
        refuse_unknown(self, attrs, [])
        x = inputs[0]
        if not computes_as_float(x.dtype):
            raise self.error(f"needs a floating-point input, got {x.dtype}")
        if len(x.shape) < 2 or x.shape[-1] != x.shape[-2]:
            raise self.error(f"needs square matrices in the last two axes, got shape {x.shape}")
        return {}

    def infer(self, inputs, attrs):
        return [TensorType(inputs[0].shape[:-2], inputs[0].dtype)]

    def reference(self, inputs, attrs):
        x = inputs[0]
        wide = x.astype(arithmetic(x.dtype), copy=False)
        return [np.asarray(np.linalg.det(wide)).astype(x.dtype)]

    def plan(self, inputs, outputs, attrs, info):
        x = inputs[0]
        m = x.shape[-1]
        batch = math.prod(x.shape[:-2])
        elem = dialect_type(x.dtype)
        acc = "f64" if elem == "f64" else "float"
        body = """    FOR_EACH(b, nb) {
        const int base = b * M * M;
        for (int e = 0; e < M * M; e++) lu[base + e] = TO_ACC(x[base + e]);
        ACC d = CAST(ACC, 1.0f);
        for (int k = 0; k < M; k++) {
            int p = k;
            ACC best = dl_abs(lu[base + k * M + k]);
            for (int r = k + 1; r < M; r++) {
                ACC v = dl_abs(lu[base + r * M + k]);
                if (v > best) { best = v; p = r; }
            }
            if (best == CAST(ACC, 0.0f)) { d = CAST(ACC, 0.0f); break; }
            if (p != k) {
                for (int c = k; c < M; c++) {
                    ACC s = lu[base + k * M + c];
                    lu[base + k * M + c] = lu[base + p * M + c];
                    lu[base + p * M + c] = s;
                }
                d = -d;
            }
            ACC pivot = lu[base + k * M + k];
            d = d * pivot;
            for (int r = k + 1; r < M; r++) {
                ACC f = lu[base + r * M + k] / pivot;
                for (int c = k + 1; c < M; c++) lu[base + r * M + c] = lu[base + r * M + c] - f * lu[base + k * M + c];
            }
        }
        y[b] = FROM_ACC(d);
    }"""
        spec = KernelSpec(f"det_{elem}", (Param("x", "T"), Param("lu", acc, "inout"), Param("y", "T", "out"),
                                          Param("nb", "int", "scalar"), Param("M", "int", "scalar")), body, elem=elem)
        local = local_1d(info, 64)
        return Plan([Launch(spec, (("in", 0), ("tmp", 0), ("out", 0), batch, m), groups_for(batch, local, info),
                            (local,))],
                    temps=[TensorType.of((max(batch * m * m, 1),), np.float64 if acc == "f64" else np.float32)])


__all__ = ["Diagonal", "Det"]

"""Tensors made from a few parameters: range, fill (ONNX ConstantOfShape), eye_like, trilu, one_hot.

Each output element is computed from its own index: one launch, one work item per
element.  fill, trilu and one_hot move bits (their values are copied, never
computed), so they work for every element type the device stores.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...info import DeviceInfo
from ..dialect import KernelSpec, Param, dialect_type
from ..op import Launch, Op, Plan, TensorType, groups_for, local_1d, register
from .binary import INT_MAX
from .movement import copy_type, ints_attr
from .reduce import (FLOAT_DTYPES, INT_DTYPES, bool_attr, compute_defines, compute_dtype, int_attr, known_attrs,
                     norm_axis)

#: element dtypes the bit-moving kernels take
ANY_DTYPES = FLOAT_DTYPES | INT_DTYPES | {"bool"}


def elementwise_launch(spec: KernelSpec, args: tuple, n: int, info: DeviceInfo) -> Launch:
    """One launch of ``spec`` over ``n`` output elements (its body a ``FOR_EACH(i, n)`` loop)."""
    local = local_1d(info)
    return Launch(spec, args, groups_for(n, local, info), (local,))


class _Generate(Op):
    """Base: refuses outputs too big for int32 indexing and dtypes a device lacks (outputs too)."""

    kernel_dtypes = ANY_DTYPES

    def unsupported(self, inputs, attrs, info):
        why = super().unsupported(inputs, attrs, info)
        if why is None and info.kernel_language != "python":
            for t in self.infer(inputs, attrs):
                if t.dtype.name not in info.dtypes:
                    return f"{info.id} has no {t.dtype.name}"
                if t.size > INT_MAX:
                    return f"{self.name}: tensors of {t.size} elements exceed the kernels' int32 indexing"
        return why


def _scalar_input(op: Op, t: TensorType, what: str) -> None:
    if t.size != 1:
        raise op.error(f"{what} must hold one value, got shape {t.shape}")


@register
class Range(_Generate):
    """range(start, delta, n): y[i] = start + i * delta for i < n (ONNX Range once its length is known); start and
    delta are one-value tensors of one numeric dtype."""

    name = "range"
    min_inputs = max_inputs = 2
    kernel_dtypes = FLOAT_DTYPES | INT_DTYPES

    def check(self, inputs, attrs):
        known_attrs(self, attrs, ("n",))
        start, delta = inputs
        if start.dtype != delta.dtype:
            raise self.error(f"start and delta must have one dtype, got {start.dtype} and {delta.dtype}")
        if start.dtype.name not in self.kernel_dtypes and start.dtype.name != "bfloat16":  # (host storage)
            raise self.error(f"needs numbers, got {start.dtype}")
        _scalar_input(self, start, "start")
        _scalar_input(self, delta, "delta")
        n = int_attr(self, attrs, "n")
        if n < 0:
            raise self.error(f"n must be >= 0, got {n}")
        return {"n": n}

    def infer(self, inputs, attrs):
        return [TensorType.of((attrs["n"],), inputs[0].dtype)]

    def reference(self, inputs, attrs):
        start, delta = inputs
        wide = compute_dtype(start.dtype)
        y = start.reshape(()).astype(wide) + np.arange(attrs["n"]).astype(wide) * delta.reshape(()).astype(wide)
        return [y.astype(start.dtype)]

    def plan(self, inputs, outputs, attrs, info):
        dtype = inputs[0].dtype
        elem = dialect_type(dtype)
        spec = KernelSpec(f"range_{elem}", (Param("start", "T", "in"), Param("delta", "T", "in"), Param("y", "T", "out"),
                                            Param("n", "int", "scalar")),
                          "    FOR_EACH(i, n) { y[i] = FROM_RT(TO_RT(start[0]) + CAST(RT, i) * TO_RT(delta[0])); }",
                          elem=elem, defines=compute_defines(dtype))
        n = attrs["n"]
        return Plan([elementwise_launch(spec, (("in", 0), ("in", 1), ("out", 0), n), n, info)])


def _fill_spec(ct: str) -> KernelSpec:
    return KernelSpec(f"fill_{ct}", (Param("v", ct, "in"), Param("y", ct, "out"), Param("n", "int", "scalar")),
                      "    FOR_EACH(i, n) { y[i] = v[0]; }", elem=ct)


@register
class Fill(_Generate):
    """fill(value, shape): a tensor of ``shape`` whose every element is the one element of ``value`` (ONNX
    ConstantOfShape)."""

    name = "fill"

    def check(self, inputs, attrs):
        known_attrs(self, attrs, ("shape",))
        shape = ints_attr(self, attrs, "shape", required=True)
        if any(s < 0 for s in shape):
            raise self.error(f"shape {list(shape)} has a negative dim")
        _scalar_input(self, inputs[0], "value")
        if inputs[0].dtype.name not in self.kernel_dtypes and inputs[0].dtype.name != "bfloat16":  # (copied as bits)
            raise self.error(f"cannot fill with {inputs[0].dtype}")
        return {"shape": shape}

    def infer(self, inputs, attrs):
        return [TensorType.of(attrs["shape"], inputs[0].dtype)]

    def reference(self, inputs, attrs):
        return [np.full(attrs["shape"], inputs[0].reshape(-1)[0], inputs[0].dtype)]

    def plan(self, inputs, outputs, attrs, info):
        n = outputs[0].size
        return Plan([elementwise_launch(_fill_spec(copy_type(inputs[0].dtype)), (("in", 0), ("out", 0), n), n, info)])


def _matrix(op: Op, t: TensorType) -> None:
    if len(t.shape) < 2:
        raise op.error(f"needs an input of rank 2 or more, got shape {t.shape}")


def _diagonal_k(op: Op, attrs: dict[str, Any], shape: tuple[int, ...]) -> int:
    """Attribute k (a diagonal offset) clamped to the diagonals a (..., H, W) matrix has, plus one each side."""
    k = int_attr(op, attrs, "k", 0)
    return max(-shape[-2] - 1, min(k, shape[-1] + 1))


@register
class EyeLike(_Generate):
    """eye_like(x, k=0, dtype=x's): ones on diagonal k (above the main one when k > 0) of a 2-D tensor shaped as x,
    zeros elsewhere."""

    name = "eye_like"

    def check(self, inputs, attrs):
        known_attrs(self, attrs, ("k", "dtype"))
        x = inputs[0]
        if len(x.shape) != 2:
            raise self.error(f"needs a 2-D input, got shape {x.shape}")
        dtype = attrs.get("dtype")
        try:
            dtype = x.dtype if dtype is None else np.dtype(dtype)
        except TypeError:
            raise self.error(f"dtype {attrs['dtype']!r} is not a dtype") from None
        if dtype.name not in self.kernel_dtypes:
            raise self.error(f"cannot make an identity of {dtype}")
        return {"k": _diagonal_k(self, attrs, x.shape), "dtype": dtype}

    def infer(self, inputs, attrs):
        return [TensorType(inputs[0].shape, attrs["dtype"])]

    def reference(self, inputs, attrs):
        rows, cols = inputs[0].shape
        return [np.eye(rows, cols, attrs["k"], dtype=attrs["dtype"])]

    def plan(self, inputs, outputs, attrs, info):
        elem = dialect_type(attrs["dtype"])
        one, zero = "FROM_ACC(CAST(ACC, 1.0f))", "FROM_ACC(CAST(ACC, 0.0f))"
        spec = KernelSpec(f"eye_like_{elem}", (Param("y", "T", "out"), Param("n", "int", "scalar"),
                                               Param("w", "int", "scalar"), Param("k", "int", "scalar")),
                          f"    FOR_EACH(i, n) {{ y[i] = (i % w) - (i / w) == k ? {one} : {zero}; }}", elem=elem)
        n = outputs[0].size
        return Plan([elementwise_launch(spec, (("out", 0), n, inputs[0].shape[1], attrs["k"]), n, info)])


@register
class Trilu(_Generate):
    """trilu(x, upper=True, k=0): the upper (lower) triangle of the last two dims of x from diagonal k on, zeros
    elsewhere (ONNX Trilu)."""

    name = "trilu"

    def check(self, inputs, attrs):
        known_attrs(self, attrs, ("upper", "k"))
        x = inputs[0]
        _matrix(self, x)
        if x.dtype.name not in self.kernel_dtypes and x.dtype.name != "bfloat16":  # (bfloat16: copied as bits)
            raise self.error(f"cannot take a triangle of {x.dtype}")
        return {"upper": bool_attr(self, attrs, "upper", True), "k": _diagonal_k(self, attrs, x.shape)}

    def infer(self, inputs, attrs):
        return [inputs[0]]

    def reference(self, inputs, attrs):
        x = inputs[0]
        return [np.triu(x, attrs["k"]) if attrs["upper"] else np.tril(x, attrs["k"])]

    def plan(self, inputs, outputs, attrs, info):
        x = inputs[0]
        ct = copy_type(x.dtype)
        keep = "c - r >= k" if attrs["upper"] else "c - r <= k"
        spec = KernelSpec(f"trilu_{'upper' if attrs['upper'] else 'lower'}_{ct}",
                          (Param("x", "T", "in"), Param("y", "T", "out"), Param("n", "int", "scalar"),
                           Param("h", "int", "scalar"), Param("w", "int", "scalar"), Param("k", "int", "scalar")),
                          "    FOR_EACH(i, n) {\n        int c = i % w; int r = (i / w) % h;\n"
                          f"        y[i] = {keep} ? x[i] : FROM_ACC(CAST(ACC, 0.0f));\n    }}", elem=ct)
        n = x.size
        return Plan([elementwise_launch(spec, (("in", 0), ("out", 0), n, x.shape[-2], x.shape[-1], attrs["k"]), n,
                                        info)])


#: index dtypes one_hot takes, and the dialect type it compares them in
_ONE_HOT_INDEX = {"int8": "int", "int16": "int", "int32": "int", "uint8": "int", "uint16": "int", "int64": "i64",
                  "uint32": "i64", "uint64": "i64", "float16": "float", "float32": "float", "float64": "f64"}


@register
class OneHot(_Generate):
    """one_hot(indices, values, depth, axis=-1): values[1] where the new axis (of ``depth``, put at ``axis``) equals
    the index, values[0] elsewhere (ONNX OneHot): float indices are truncated, negative ones count from the end of
    the new axis, and an index outside [-depth, depth) gives a line of values[0]."""

    name = "one_hot"
    min_inputs = max_inputs = 2

    def check(self, inputs, attrs):
        known_attrs(self, attrs, ("depth", "axis"))
        idx, values = inputs
        if idx.dtype.name not in _ONE_HOT_INDEX:
            raise self.error(f"indices must be numbers, got {idx.dtype}")
        if values.size != 2 or len(values.shape) != 1:
            raise self.error(f"values must be [off, on] (shape (2,)), got shape {values.shape}")
        if values.dtype.name not in self.kernel_dtypes and values.dtype.name != "bfloat16":  # (host storage)
            raise self.error(f"values cannot be {values.dtype}")
        depth = int_attr(self, attrs, "depth")
        if depth < 1:
            raise self.error(f"depth must be >= 1, got {depth}")
        axis = norm_axis(self, int_attr(self, attrs, "axis", -1), len(idx.shape) + 1)
        return {"depth": depth, "axis": axis}

    def infer(self, inputs, attrs):
        idx, values = inputs
        shape = list(idx.shape)
        shape.insert(attrs["axis"], attrs["depth"])
        return [TensorType.of(shape, values.dtype)]

    def unsupported(self, inputs, attrs, info):
        why = super().unsupported(inputs, attrs, info)
        if why is None and info.kernel_language != "python" and _ONE_HOT_INDEX[inputs[0].dtype.name] == "i64" \
                and "int64" not in info.dtypes:
            return f"{info.id} has no int64 (one_hot compares {inputs[0].dtype} indices in it)"
        return why

    def reference(self, inputs, attrs):
        idx, values = inputs
        depth, axis = attrs["depth"], attrs["axis"]
        k = np.trunc(idx).astype(np.int64) if idx.dtype.kind == "f" else idx.astype(np.int64)
        k = np.expand_dims(np.where(k < 0, k + depth, k), axis)
        line = np.arange(depth).reshape([depth if d == axis else 1 for d in range(k.ndim)])
        return [np.where(k == line, values[1], values[0])]

    def plan(self, inputs, outputs, attrs, info):
        idx, values = inputs
        ct, wide = copy_type(values.dtype), _ONE_HOT_INDEX[idx.dtype.name]
        it = dialect_type(idx.dtype)
        read = f"CAST({wide}, idx[o * inner + r])"
        if wide in ("float", "f64"):
            read = f"dl_trunc({read})"
        body = ("    FOR_EACH(i, n) {\n        int r = i % inner; int t = i / inner;\n"
                "        int d = t % depth; int o = t / depth;\n"
                f"        {wide} k = {read};\n"
                f"        if (k < CAST({wide}, 0)) k = k + CAST({wide}, depth);\n"
                f"        y[i] = k == CAST({wide}, d) ? v[1] : v[0];\n    }}")
        spec = KernelSpec(f"one_hot_{it}_{ct}", (Param("idx", it, "in"), Param("v", ct, "in"), Param("y", ct, "out"),
                                                 Param("n", "int", "scalar"), Param("inner", "int", "scalar"),
                                                 Param("depth", "int", "scalar")), body, elem=ct)
        n = outputs[0].size
        inner = math.prod(idx.shape[attrs["axis"]:])
        return Plan([elementwise_launch(spec, (("in", 0), ("in", 1), ("out", 0), n, inner, attrs["depth"]), n, info)])

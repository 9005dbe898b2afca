"""Selection along one axis: arg_max, arg_min (ONNX ArgMax/ArgMin) and top_k (ONNX TopK).

The input is seen as (outer, dim, inner); a line is one (outer, inner) pair.  Each
kernel orders the line's elements (value, then index) and picks, pass after pass,
the first element that comes after the one picked before: arg_max and arg_min make
one pass, top_k makes k.  Short lines run one work item each; long ones a
work-group each, every item scanning a strided part of the line and the group
combining (value, index) pairs in shared memory.

Order: arg_max and arg_min follow NumPy (a NaN wins, the first one); top_k orders
NaN above every number (as NumPy's sort does); ties go to the lower index (the
higher one with ``select_last_index``), as onnxruntime does.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...dtypes import is_float
from ...info import DeviceInfo
from ..dialect import KernelSpec, Param, dialect_type
from ..op import Launch, Op, Plan, TensorType, groups_for, local_1d, register
from .binary import INT_MAX
from .numeric import computable
from .reduce import (FLOAT_DTYPES, GROUP_THRESHOLD, INT_DTYPES, bool_attr, compute_defines, compute_type, group_local,
                     int_attr, known_attrs, norm_axis)

INDEX = np.dtype(np.int64)


def _before(better: str, lower_first: bool, is_float: bool) -> Any:
    """A function giving the dialect condition "(av, ai) comes before (bv, bi)" in the order ``better`` names:
    "max" (larger first, NaN first), "min" (smaller first, NaN first) or "min_nan_last"."""
    def condition(av: str, ai: str, bv: str, bi: str) -> str:
        if better == "max":
            strict = f"{av} > {bv}"
        else:
            strict = f"{av} < {bv}"
        tie = f"{ai} < {bi}" if lower_first else f"{ai} > {bi}"
        if not is_float:
            return f"({strict} || ({av} == {bv} && {tie}))"
        nan_first = better != "min_nan_last"
        nan = (f"(dl_isnan({av}) && !dl_isnan({bv}))" if nan_first else f"(dl_isnan({bv}) && !dl_isnan({av}))")
        same = f"({av} == {bv} || (dl_isnan({av}) && dl_isnan({bv})))"
        return f"({strict} || {nan} || ({same} && {tie}))"
    return condition


def select_launch(x: TensorType, axis: int, k: int, better: str, lower_first: bool, values: bool,
                  info: DeviceInfo) -> Launch:
    """The launch picking the first ``k`` elements of every line of ``x`` along ``axis`` in the given order:
    indices into output ``("out", 1 if values else 0)`` (int64), values into ``("out", 0)`` when ``values``."""
    dtype = x.dtype
    elem, rt = dialect_type(dtype), compute_type(dtype)
    dim = x.shape[axis]
    inner = math.prod(x.shape[axis + 1:])
    lines = math.prod(x.shape) // dim if dim else 0
    before = _before(better, lower_first, is_float(dtype))
    grouped = dim >= GROUP_THRESHOLD
    if grouped:
        local = group_local(info)
        head = "    for (int l = GROUP(0); l < lines; l += NGROUPS(0)) {\n"
        scan = "            for (int t = LID(0); t < dim; t += LSIZE(0)) {\n"
        combine = (
            "            sv[LID(0)] = bv; si[LID(0)] = bi;\n            BARRIER();\n"
            "            for (int s = LSIZE(0) / 2; s > 0; s = s / 2) {\n"
            "                if (LID(0) < s) {\n"
            "                    RT ov = sv[LID(0) + s]; int oi = si[LID(0) + s];\n"
            f"                    if (oi >= 0 && (si[LID(0)] < 0 || {before('ov', 'oi', 'sv[LID(0)]', 'si[LID(0)]')})) "
            "{ sv[LID(0)] = ov; si[LID(0)] = oi; }\n"
            "                }\n                BARRIER();\n            }\n"
            "            bv = sv[0]; bi = si[0];\n            BARRIER();\n")
        write = "            if (LID(0) == 0) {\n"
        gsize = groups_for(lines * local, local, info)
        shared = ((rt, "sv", local), ("int", "si", local))
    else:
        local = local_1d(info)
        head = "    FOR_EACH(l, lines) {\n"
        scan = "            for (int t = 0; t < dim; t++) {\n"
        combine = ""
        write = "            {\n"
        gsize = groups_for(lines, local, info)
        shared = ()
    out = "(o * kk + j) * inner + r"
    body = (head + "        int o = l / inner; int r = l - o * inner;\n        int base = o * dim * inner + r;\n"
            "        RT pv = CAST(RT, 0); int pi = -1;\n"
            "        for (int j = 0; j < kk; j++) {\n"
            "            RT bv = CAST(RT, 0); int bi = -1;\n" + scan
            + "                RT v = TO_RT(x[base + t * inner]);\n"
            f"                if ((pi < 0 || {before('pv', 'pi', 'v', 't')}) && (bi < 0 || {before('v', 't', 'bv', 'bi')})) "
            "{ bv = v; bi = t; }\n            }\n" + combine + write
            + (f"                yv[{out}] = FROM_RT(bv);\n" if values else "")
            + f"                yi[{out}] = CAST(i64, bi);\n            }}\n"
            "            pv = bv; pi = bi;\n        }\n    }")
    params = [Param("x", "T", "in")] + ([Param("yv", "T", "out")] if values else []) + [Param("yi", "i64", "out")]
    params += [Param(n, "int", "scalar") for n in ("lines", "dim", "inner", "kk")]
    variant = f"g{local}" if grouped else "l"
    spec = KernelSpec(f"select_{better}_{'first' if lower_first else 'last'}_{'vi' if values else 'i'}_{elem}_{variant}",
                      tuple(params), body, elem=elem, shared=shared, local_size=(local,),
                      defines=compute_defines(dtype))
    outs = [("out", 0), ("out", 1)] if values else [("out", 0)]
    return Launch(spec, (("in", 0), *outs, lines, dim, inner, k), gsize, (local,))


class _Select(Op):
    """Base of the selection ops: numeric inputs, int64 indices out."""

    kernel_dtypes = FLOAT_DTYPES | INT_DTYPES

    def _numeric(self, x: TensorType) -> None:
        if x.dtype.name not in self.kernel_dtypes and x.dtype.name != "bfloat16":  # (bfloat16: compared as float)
            raise self.error(f"needs a numeric input, got {x.dtype}")
        if not x.shape:
            raise self.error("needs an input of rank 1 or more")

    def unsupported(self, inputs, attrs, info):
        why = super().unsupported(inputs, attrs, info)
        if why is None and info.kernel_language != "python":
            if INDEX.name not in info.dtypes:
                return f"{info.id} has no int64 (the indices)"
            if inputs[0].size > INT_MAX:
                return f"{self.name}: tensors of {inputs[0].size} elements exceed the kernels' int32 indexing"
        return why


class _Arg(_Select):
    """arg_max / arg_min(x, axis=0, keepdims=True, select_last_index=False): int64 index of the extreme."""

    better = "max"

    def check(self, inputs, attrs):
        known_attrs(self, attrs, ("axis", "keepdims", "select_last_index"))
        x = inputs[0]
        self._numeric(x)
        axis = norm_axis(self, int_attr(self, attrs, "axis", 0), len(x.shape))
        if x.shape[axis] == 0:
            raise self.error(f"axis {axis} of {x.shape} is empty: it has no {self.better}imum")
        return {"axis": axis, "keepdims": bool_attr(self, attrs, "keepdims", True),
                "select_last_index": bool_attr(self, attrs, "select_last_index", False)}

    def infer(self, inputs, attrs):
        shape = list(inputs[0].shape)
        if attrs["keepdims"]:
            shape[attrs["axis"]] = 1
        else:
            del shape[attrs["axis"]]
        return [TensorType.of(shape, INDEX)]

    def reference(self, inputs, attrs):
        x, axis = computable(inputs[0]), attrs["axis"]
        arg = np.argmax if self.better == "max" else np.argmin
        if attrs["select_last_index"]:
            y = x.shape[axis] - 1 - arg(np.flip(x, axis), axis=axis, keepdims=attrs["keepdims"])
        else:
            y = arg(x, axis=axis, keepdims=attrs["keepdims"])
        return [np.asarray(y, INDEX)]

    def plan(self, inputs, outputs, attrs, info):
        return Plan([select_launch(inputs[0], attrs["axis"], 1, self.better,
                                   not attrs["select_last_index"], False, info)])


@register
class ArgMax(_Arg):
    """arg_max(x, axis, keepdims, select_last_index): index of the largest element (a NaN wins)."""

    name = "arg_max"


@register
class ArgMin(_Arg):
    """arg_min(x, axis, keepdims, select_last_index): index of the smallest element (a NaN wins)."""

    name = "arg_min"
    better = "min"


@register
class TopK(_Select):
    """top_k(x, k, axis=-1, largest=True, sorted=True): the k largest (smallest) elements along ``axis`` and their
    int64 indices, in order (ties: the lower index first; NaN above every number).  Always sorted."""

    name = "top_k"

    def check(self, inputs, attrs):
        known_attrs(self, attrs, ("k", "axis", "largest", "sorted"))
        x = inputs[0]
        self._numeric(x)
        axis = norm_axis(self, int_attr(self, attrs, "axis", -1), len(x.shape))
        k = int_attr(self, attrs, "k")
        if not 0 <= k <= x.shape[axis]:
            raise self.error(f"k ({k}) must lie in [0, {x.shape[axis]}] (axis {axis} of {x.shape})")
        return {"k": k, "axis": axis, "largest": bool_attr(self, attrs, "largest", True),
                "sorted": bool_attr(self, attrs, "sorted", True)}

    def infer(self, inputs, attrs):
        shape = list(inputs[0].shape)
        shape[attrs["axis"]] = attrs["k"]
        return [TensorType.of(shape, inputs[0].dtype), TensorType.of(shape, INDEX)]

    def reference(self, inputs, attrs):
        x, axis, k = computable(inputs[0]), attrs["axis"], attrs["k"]
        if attrs["largest"]:  # stable descending: sort the reversed line ascending, read it backwards
            order = x.shape[axis] - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
        else:
            order = np.argsort(x, axis=axis, kind="stable")
        idx = np.take(order, np.arange(k), axis=axis)
        return [np.take_along_axis(inputs[0], idx, axis=axis), idx.astype(INDEX)]

    def plan(self, inputs, outputs, attrs, info):
        if attrs["k"] == 0:
            return Plan([])
        better = "max" if attrs["largest"] else "min_nan_last"
        return Plan([select_launch(inputs[0], attrs["axis"], attrs["k"], better, True, True, info)])

"""Scans along one axis: cumsum and cumprod (ONNX CumSum, CumProd), inclusive or exclusive, forward or reversed.

The input is seen as (outer, dim, inner); a line is one (outer, inner) pair.  Short
lines run one work item each, scanning in order.  Long lines run a work-group each:
every item scans a contiguous chunk for its total, the group shares the totals in
shared memory, and every item scans its chunk again from the totals before it.
Values are combined in the reductions' compute type (integers exactly).
"""

from __future__ import annotations

import math

import numpy as np

from ..dialect import KernelSpec, Param, dialect_type
from ..op import Launch, Op, Plan, groups_for, local_1d, register
from .binary import INT_MAX
from .reduce import (FLOAT_DTYPES, GROUP_THRESHOLD, INT_DTYPES, bool_attr, compute_defines, compute_dtype,
                     compute_type, group_local, int_attr, known_attrs, literal, norm_axis)


class Scan(Op):
    """y = running combination of x along ``axis`` (``exclusive``: of the elements before; ``reverse``: from the
    end)."""

    kernel_dtypes = FLOAT_DTYPES | INT_DTYPES
    #: the combination's identity and its dialect and NumPy forms
    identity = 0
    operator = "+"
    numpy = staticmethod(np.cumsum)

    def check(self, inputs, attrs):
        known_attrs(self, attrs, ("axis", "exclusive", "reverse"))
        x = inputs[0]
        if x.dtype.name not in self.kernel_dtypes and x.dtype.name != "bfloat16":  # (bfloat16: sums in float32)
            raise self.error(f"needs a numeric input, got {x.dtype}")
        if not x.shape:
            raise self.error("needs an input of rank 1 or more")
        return {"axis": norm_axis(self, int_attr(self, attrs, "axis", 0), len(x.shape)),
                "exclusive": bool_attr(self, attrs, "exclusive", False),
                "reverse": bool_attr(self, attrs, "reverse", False)}

    def infer(self, inputs, attrs):
        return [inputs[0]]

    def reference(self, inputs, attrs):
        x, axis = inputs[0], attrs["axis"]
        w = x.astype(compute_dtype(x.dtype), copy=False)
        if attrs["reverse"]:
            w = np.flip(w, axis)
        y = self.numpy(w, axis=axis, dtype=w.dtype)
        if attrs["exclusive"] and y.shape[axis]:
            first = np.full_like(np.take(y, [0], axis=axis), self.identity)
            y = np.concatenate([first, np.take(y, np.arange(y.shape[axis] - 1), axis=axis)], axis=axis)
        if attrs["reverse"]:
            y = np.flip(y, axis)
        return [np.ascontiguousarray(y).astype(x.dtype, copy=False)]

    def unsupported(self, inputs, attrs, info):
        why = super().unsupported(inputs, attrs, info)
        if why is None and info.kernel_language != "python" and inputs[0].size > INT_MAX:
            return f"{self.name}: tensors of {inputs[0].size} elements exceed the kernels' int32 indexing"
        return why

    def plan(self, inputs, outputs, attrs, info):
        x, axis = inputs[0], attrs["axis"]
        if not x.size:
            return Plan([])
        dtype = x.dtype
        elem, rt = dialect_type(dtype), compute_type(dtype)
        dim = x.shape[axis]
        inner = math.prod(x.shape[axis + 1:])
        lines = x.size // dim
        ident, op = literal(self.identity, rt), self.operator

        def walk(first: str, last: str, start: str, write: bool) -> str:
            """Scan positions [first, last) of the line from accumulator ``start`` (writing y when ``write``)."""
            step = ("                if (excl != 0) y[off] = FROM_RT(acc);\n"
                    f"                acc = acc {op} TO_RT(x[off]);\n"
                    "                if (excl == 0) y[off] = FROM_RT(acc);\n") if write else \
                f"                acc = acc {op} TO_RT(x[off]);\n"
            return (f"            RT acc = {start};\n            for (int j = {first}; j < {last}; j++) {{\n"
                    "                int off = base + (rev != 0 ? dim - 1 - j : j) * inner;\n" + step
                    + "            }\n")

        grouped = dim >= GROUP_THRESHOLD
        if grouped:
            local = group_local(info)
            body = ("    for (int l = GROUP(0); l < lines; l += NGROUPS(0)) {\n"
                    "        int o = l / inner; int r = l - o * inner; int base = o * dim * inner + r;\n"
                    "        int chunk = (dim + LSIZE(0) - 1) / LSIZE(0);\n"
                    "        int first = LID(0) * chunk < dim ? LID(0) * chunk : dim;\n"
                    "        int last = first + chunk < dim ? first + chunk : dim;\n        {\n"
                    + walk("first", "last", ident, False)
                    + "            red[LID(0)] = acc;\n        }\n        BARRIER();\n"
                    f"        RT before = {ident};\n"
                    f"        for (int p = 0; p < LID(0); p++) before = before {op} red[p];\n        {{\n"
                    + walk("first", "last", "before", True) + "        }\n        BARRIER();\n    }")
            shared = ((rt, "red", local),)
            gsize = groups_for(lines * local, local, info)
        else:
            local = local_1d(info)
            body = ("    FOR_EACH(l, lines) {\n"
                    "        int o = l / inner; int r = l - o * inner; int base = o * dim * inner + r;\n        {\n"
                    + walk("0", "dim", ident, True) + "        }\n    }")
            shared = ()
            gsize = groups_for(lines, local, info)
        spec = KernelSpec(f"{self.name}_{elem}_{f'g{local}' if grouped else 'l'}",
                          (Param("x", "T", "in"), Param("y", "T", "out"),
                           *[Param(n, "int", "scalar") for n in ("lines", "dim", "inner", "excl", "rev")]),
                          body, elem=elem, shared=shared, local_size=(local,), defines=compute_defines(dtype))
        return Plan([Launch(spec, (("in", 0), ("out", 0), lines, dim, inner, int(attrs["exclusive"]),
                                   int(attrs["reverse"])), gsize, (local,))])


@register
class CumSum(Scan):
    """cumsum(x, axis=0, exclusive=False, reverse=False): running sums along ``axis``."""

    name = "cumsum"


@register
class CumProd(Scan):
    """cumprod(x, axis=0, exclusive=False, reverse=False): running products along ``axis``."""

    name = "cumprod"
    identity = 1
    operator = "*"
    numpy = staticmethod(np.cumprod)

"""What the normalization, attention and loss ops share: floating-point inputs (bfloat16 computed in float32),
a base for float kernels that refuses what a device language cannot do, and the row kernel.

A row kernel runs a short program over every row (the elements one output statistic runs over, ``K`` of them,
``R`` rows): one work item per row for short rows, one work-group per row (partials combined in shared memory)
for long ones, the two shapes of the reductions.
"""

from __future__ import annotations

import math

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...info import DeviceInfo
from ..dialect import KernelSpec, Param, dialect_type
from ..op import Launch, Op, TensorType, groups_for, local_1d
from ..render import lacks
from .binary import INT_MAX
from .reduce import GROUP_THRESHOLD, acc_type, group_local, group_reduce

#: element dtypes the float kernels of these families take
FLOAT_KERNELS = frozenset({"float16", "float32", "float64"})


def is_float(dtype: np.dtype) -> bool:
    """True for floating-point dtypes, bfloat16 (a storage dtype NumPy knows through ml_dtypes) included."""
    return dtype.kind == "f" or dtype.name == "bfloat16"


def float_tensor(op: Op, t: TensorType, what: str = "input") -> None:
    """Refuse a tensor that is not floating point, naming the op."""
    if not is_float(t.dtype):
        raise op.error(f"needs a floating-point {what}, got {t.dtype}")


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a reference computes in: float32 for 16-bit floats (as the kernels do), else the dtype."""
    return np.dtype(np.float32) if dtype.itemsize == 2 else np.dtype(dtype)


def widen(x: np.ndarray) -> np.ndarray:
    """``x`` in its compute dtype (no copy when it already is)."""
    return x.astype(compute_dtype(x.dtype), copy=False)


def too_big(op: Op, types: Sequence[TensorType]) -> str | None:
    """Why int32 kernel indexing cannot address these tensors (None when it can)."""
    for t in types:
        if t.size > INT_MAX:
            return f"{op.name}: tensors of {t.size} elements exceed the kernels' int32 indexing"
    return None


class FloatKernelOp(Op):
    """An op whose kernels take float16, float32 and float64 elements; refused on a kernel device where a tensor
    is too big for int32 indexing or where the language lacks a float64 form of a function the kernels call."""

    kernel_dtypes = FLOAT_KERNELS
    #: dialect math the kernels call (``"dl_exp( dl_log("``), checked with ``render.lacks``
    math: str = ""

    def unsupported(self, inputs: Sequence[TensorType], attrs: dict[str, Any], info: DeviceInfo) -> str | None:
        why = super().unsupported(inputs, attrs, info)
        if why is None and info.kernel_language != "python":
            why = too_big(self, [*inputs, *self.infer(inputs, attrs)])
            if why is None and self.math:
                missing = lacks(self.math, info.kernel_language, dialect_type(inputs[0].dtype))
                why = f"{self.name}: {missing}" if missing else None
        return why


# -- the row kernel ----------------------------------------------------------------------------------------------
# A row program is a list of phases: ("reduce", var, init, combine, expr, after) computes ACC ``var`` as the
# combination of ``expr`` over the row (``v`` is the element as ACC, ``k`` its index in the row), then runs the
# statements ``after``; ("write", stmt) runs ``stmt`` for every element of the row.  ``off`` is the element's
# index in x and y.  In ``after``, ``ROW_LEAD`` is true in exactly one work item of the row (for writing
# per-row results).
Phase = tuple


#: the longest rows a work item sums alone on a CPU device: a float32 sum one element after another loses about
#: sqrt(K) ulp (softmax over 50000: the two forms 1e-5 apart), a group's tree sum less
ITEM_ROW_MAX = 4096


def grouped_rows(R: int, K: int, info: DeviceInfo) -> bool:
    """Whether R rows of K elements each get a work-group (its items reading adjacent elements) rather than a work
    item: rows of ``GROUP_THRESHOLD`` elements or more, except on CPU devices with rows enough to give every core
    four, up to ``ITEM_ROW_MAX`` long, where a group's barriers cost more than one item's loop over its row
    (softmax of (2, 4, 128, 128) on the 2-core VM: lavapipe 38.8 -> 1.8 ms, PoCL 7.0 -> 2.0 ms; layer
    normalization on PoCL 5.8 -> 0.9 ms; ``benchmarks.row_forms``)."""
    return K >= GROUP_THRESHOLD and (info.device_type != "cpu" or R < 4 * info.compute_units or K > ITEM_ROW_MAX)


#: elements each item of a grouped row reads, about, where rows are shorter than the work-group: a run of
#: ``row_lanes`` items per row, several rows a group
LANE_ELEMENTS = 4
#: the fewest items a grouped row gets (a GPU's SIMD width: fewer leave a warp part idle)
MIN_LANES = 32


def row_lanes(K: int, local: int) -> int:
    """Items per row of a grouped launch of work-groups of ``local`` items: the whole group for long rows; for
    short ones the power of two (at least ``MIN_LANES``) giving each about ``LANE_ELEMENTS`` elements, so that one
    group runs ``local // lanes`` rows at once and its reductions take fewer steps (softmax over 128 keys: 32 items
    a row, 8 rows a group of 256, where a group per row left half its items idle and reduced over 256)."""
    lanes = 1 << max(0, math.ceil(math.log2(max(1, -(-K // LANE_ELEMENTS)))))
    return max(1, min(local, max(lanes, MIN_LANES)))


def row_launch(name: str, elem: str, R: int, K: int, buffers: Sequence[Param], scalars: Sequence[Param],
               args: Sequence[Any], header: str, off: str, phases: Sequence[Phase], info: DeviceInfo) -> Launch:
    """One launch running ``phases`` over ``R`` rows of ``K`` elements (x is the first buffer, read as ``v``);
    ``header`` (statements) runs first in each row ``r``; ``args`` are the buffers' then the scalars'."""
    grouped = grouped_rows(R, K, info)
    lanes = None
    if grouped:
        local = group_local(info)
        lanes = row_lanes(K, local)
        per = local // lanes
        # a run of ``lanes`` items per row, ``per`` rows a group; every item of the group loops as long as the
        # group has rows (its reductions' barriers), an item past the last row on a copy of the last, writing nothing
        start, step, lead = f"(live ? LID(0) % {lanes} : K)", str(lanes), f"(live && LID(0) % {lanes} == 0)"
        head = (f"    for (int r0 = GROUP(0) * {per}; r0 < R; r0 += NGROUPS(0) * {per}) {{\n"
                f"        bool live = r0 + LID(0) / {lanes} < R;\n"
                f"        int r = live ? r0 + LID(0) / {lanes} : R - 1;\n")
    else:
        local = local_1d(info)
        start, step, lead = "0", "1", "(K >= 0)"
        head = "    FOR_EACH(r, R) {\n"
    body = [head, header]
    loop = f"        for (int k = {start}; k < K; k += {step}) {{\n            int off = {off};\n"
    for phase in phases:
        if phase[0] == "reduce":
            _, var, init, combine, expr, after = phase
            body.append(f"        ACC {var} = {init};\n")
            body.append(loop + f"            ACC v = TO_ACC(x[off]);\n            {var} = {combine(var, expr)};\n"
                        "        }\n")
            if grouped:
                body.append(group_reduce(var, combine, lanes=None if lanes == local else lanes))
            body.append(after.replace("ROW_LEAD", lead))
        else:
            body.append(loop + "            ACC v = TO_ACC(x[off]);\n" + phase[1] + "        }\n")
    body.append("    }")
    params = (*buffers, Param("R", "int", "scalar"), Param("K", "int", "scalar"), *scalars)
    shared = ((acc_type(elem), "red", local),) if grouped else ()
    variant = f"g{local}w{lanes}" if grouped else "l"
    spec = KernelSpec(f"{name}_{variant}", params, "".join(body), elem=elem, shared=shared, local_size=(local,))
    gsize = groups_for(-(-R // (local // lanes)) * local, local, info) if grouped else groups_for(R, local, info)
    return Launch(spec, (*args[:len(buffers)], R, K, *args[len(buffers):]), gsize, (local,))


def axis_rows(shape: Sequence[int], axis: int) -> tuple[int, int, int]:
    """(rows R, row length K, stride ``inner`` of the row's elements) of rows along ``axis``."""
    K = int(shape[axis])
    inner = math.prod(int(d) for d in shape[axis + 1:])
    R = math.prod(int(d) for d in shape) // K if K else 0
    return R, K, inner


#: header and element offset of a row along an axis whose elements lie ``inner`` apart (``axis_rows``)
AXIS_ROW_HEADER = "        int base = (r / inner) * K * inner + r % inner;\n"
AXIS_ROW_OFF = "base + k * inner"

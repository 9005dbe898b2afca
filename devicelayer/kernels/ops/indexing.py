"""Indexing by tensors of indices: gather_elements, gather_nd, scatter_elements, scatter_nd, tensor_scatter,
reverse_sequence (ONNX semantics).

Gathers move bits (any element type the device stores).  Scatters copy the data
to the output first, then write the updates into it: without a reduction one
work item per update element; with one (add, mul, max, min), every work item
owns the output elements it combines into and walks their updates in order, so
repeated indices combine without atomics.  Every index is checked: a bad one is
an InvalidArgument naming the op and the index, on every device (``Flag``).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ...errors import UnsupportedOp
from ...info import DeviceInfo
from ..dialect import KernelSpec, Param, dialect_type
from ..op import Launch, Op, Plan, TensorType, add_flag, groups_for, local_1d, raise_flag, register
from .binary import INT_MAX, collapse, contiguous_strides, unravel
from .generate import ANY_DTYPES
from .indices import bad_value, checked_index, index_dtype, normalized, out_of_range
from .movement import copy_launch, copy_type
from .reduce import MAX_SCALARS, compute_defines, int_attr, known_attrs, larger, norm_axis, smaller

#: scatter reductions: name -> NumPy ufunc
REDUCTIONS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}
#: the most entries of an index tuple (gather_nd, scatter_nd)
MAX_DIMS = 8


def _fits(op: Op, scalars: int) -> None:
    """UnsupportedOp when a kernel would take more int scalars than GLSL push constants hold."""
    if scalars > MAX_SCALARS:
        raise UnsupportedOp(f"{op.name}: the layout needs {scalars} kernel scalars, more than {MAX_SCALARS}; "
                            "fewer dims would fit")


def _launch(spec: KernelSpec, args: tuple, n: int, info: DeviceInfo) -> Launch:
    local = local_1d(info)
    return Launch(spec, args, groups_for(n, local, info), (local,))


def _combine(reduction: str, dtype: np.dtype, old: str, new: str) -> str:
    """Dialect expression of an output element ``old`` updated with ``new`` (elements of ``dtype``)."""
    if reduction == "none":
        return new
    a, b = f"TO_RT({old})", f"TO_RT({new})"
    combined = {"add": f"({a} + {b})", "mul": f"({a} * {b})", "max": larger(a, b, dtype),
                "min": smaller(a, b, dtype)}[reduction]
    return f"FROM_RT({combined})"


def _elem(dtype: np.dtype, reduction: str) -> str:
    """The kernel element type: bits for plain writes, the dtype itself where a reduction computes."""
    return copy_type(dtype) if reduction == "none" else dialect_type(dtype)


def _copy_data(dtype: np.dtype, n: int, info: DeviceInfo, who: str) -> list[Launch]:
    """The launch copying input 0 (n elements) to output 0, the first step of a scatter."""
    step = copy_launch(dtype, ("in", 0), ("out", 0), (n,), (1,), 0, (1,), 0, info, who)
    return [] if step is None else [step]


class _Indexing(Op):
    """Base: index checks (``checks_values``), data of any dtype, int32 indexing limits on devices."""

    kernel_dtypes = ANY_DTYPES
    checks_values = True

    def unsupported(self, inputs, attrs, info):
        why = super().unsupported(inputs, attrs, info)
        if why is None and info.kernel_language != "python":
            if copy_type(inputs[0].dtype) is None:
                return f"{self.name} has no kernel for {inputs[0].dtype}"
            for t in list(inputs) + self.infer(inputs, attrs):
                if t.size > INT_MAX:
                    return f"{self.name}: tensors of {t.size} elements exceed the kernels' int32 indexing"
            try:
                self.plan(inputs, self.infer(inputs, attrs), attrs, info)
            except UnsupportedOp as exc:
                return str(exc)
        return why

    def _reduction(self, attrs: dict[str, Any], dtype: np.dtype) -> str:
        reduction = attrs.get("reduction", "none")
        if reduction not in ("none", *REDUCTIONS):
            raise self.error(f"reduction must be one of none, add, mul, max, min; got {reduction!r}")
        if reduction != "none" and dtype.kind == "b":
            raise self.error(f"reduction {reduction!r} does not apply to bool data")
        return reduction


def _same_rank(op: Op, data: TensorType, idx: TensorType) -> None:
    if len(idx.shape) != len(data.shape):
        raise op.error(f"indices (shape {idx.shape}) must have the rank of data (shape {data.shape})")
    if not data.shape:
        raise op.error("data must have rank >= 1")


# -- gather_elements / scatter_elements ---------------------------------------------------------------------------
def _axis_walk(shape: Sequence[int], walks: Sequence[Sequence[int]], axis: int) -> tuple[list[int], list[list[int]]]:
    """``shape`` without ``axis`` collapsed with the stride lists ``walks`` (each also without ``axis``)."""
    keep = [d for d in range(len(shape)) if d != axis]
    return collapse([shape[d] for d in keep], [[w[d] for d in keep] for w in walks])


@register
class GatherElements(_Indexing):
    """gather_elements(data, indices, axis=0): y[i..] = data[i.. with the axis coordinate replaced by indices[i..]]
    (ONNX GatherElements); y has the shape of indices."""

    name = "gather_elements"
    min_inputs = max_inputs = 2

    def check(self, inputs, attrs):
        known_attrs(self, attrs, ("axis",))
        data, idx = inputs
        _same_rank(self, data, idx)
        index_dtype(self, idx.dtype)
        axis = norm_axis(self, int_attr(self, attrs, "axis", 0), len(data.shape))
        for d, (a, b) in enumerate(zip(idx.shape, data.shape)):
            if d != axis and a > b:
                raise self.error(f"indices (shape {idx.shape}) exceed data (shape {data.shape}) in dim {d}")
        return {"axis": axis}

    def infer(self, inputs, attrs):
        return [TensorType(inputs[1].shape, inputs[0].dtype)]

    def reference(self, inputs, attrs):
        data, idx = inputs
        axis = attrs["axis"]
        index = list(np.indices(idx.shape, sparse=True))
        index[axis] = normalized(self, idx, data.shape[axis], f"axis {axis}")
        return [data[tuple(index)]]

    def plan(self, inputs, outputs, attrs, info):
        data, idx = inputs
        axis, n = attrs["axis"], outputs[0].size
        plan = Plan([])
        if n == 0:
            return plan
        flag, ft = add_flag(plan, idx.dtype, out_of_range(self, data.shape[axis], f"axis {axis}"), info)
        dstrides = contiguous_strides(data.shape)
        masked = [0 if d == axis else s for d, s in enumerate(dstrides)]
        sizes, (walk,) = collapse(idx.shape, [masked])
        _fits(self, 3 + 2 * len(sizes))
        it, ct = index_dtype(self, idx.dtype), copy_type(data.dtype)
        names = [f"n{d}" for d in range(len(sizes))]
        strides = [f"s{d}" for d in range(len(sizes))]
        body = ("    FOR_EACH(i, n) {\n        int off = 0;\n" + unravel("i", names, [strides], ["off"])
                + checked_index("k", "idx[i]", it, "adim", ft)
                + "        y[i] = x[off + k * astride];\n    }")
        spec = KernelSpec(f"gather_elements_{ct}_{it}_r{len(sizes)}",
                          (Param("x", ct, "in"), Param("idx", it, "in"), Param("y", ct, "out"), Param("flag", ft, "out"),
                           *[Param(p, "int", "scalar") for p in ["n", "adim", "astride", *names, *strides]]),
                          body, elem=ct)
        plan.steps.append(_launch(spec, (("in", 0), ("in", 1), ("out", 0), flag, n, data.shape[axis], dstrides[axis],
                                         *sizes, *walk), n, info))
        return plan


def _scatter_np(out: np.ndarray, index: tuple, updates: np.ndarray, reduction: str) -> None:
    """Write ``updates`` into ``out`` at ``index`` (a tuple of index arrays), combining as ``reduction`` says."""
    if reduction == "none":
        out[index] = updates
    else:
        REDUCTIONS[reduction].at(out, index, updates)


@register
class ScatterElements(_Indexing):
    """scatter_elements(data, indices, updates, axis=0, reduction="none"): data with updates[i..] written (or
    combined: add, mul, max, min) at i.. with the axis coordinate replaced by indices[i..] (ONNX ScatterElements;
    without a reduction a repeated index keeps its last update)."""

    name = "scatter_elements"
    min_inputs = max_inputs = 3

    def check(self, inputs, attrs):
        known_attrs(self, attrs, ("axis", "reduction"))
        data, idx, upd = inputs
        _same_rank(self, data, idx)
        index_dtype(self, idx.dtype)
        if upd.shape != idx.shape or upd.dtype != data.dtype:
            raise self.error(f"updates ({upd.shape} {upd.dtype}) must have the shape of indices ({idx.shape}) and "
                             f"the dtype of data ({data.dtype})")
        axis = norm_axis(self, int_attr(self, attrs, "axis", 0), len(data.shape))
        for d, (a, b) in enumerate(zip(idx.shape, data.shape)):
            if d != axis and a > b:
                raise self.error(f"indices (shape {idx.shape}) exceed data (shape {data.shape}) in dim {d}")
        return {"axis": axis, "reduction": self._reduction(attrs, data.dtype)}

    def infer(self, inputs, attrs):
        return [inputs[0]]

    def reference(self, inputs, attrs):
        data, idx, upd = inputs
        axis = attrs["axis"]
        k = normalized(self, idx, data.shape[axis], f"axis {axis}")
        index = list(np.indices(idx.shape, sparse=True))
        index[axis] = k
        out = data.copy()
        _scatter_np(out, tuple(index), upd, attrs["reduction"])
        return [out]

    def plan(self, inputs, outputs, attrs, info):
        data, idx = inputs[:2]
        axis, reduction = attrs["axis"], attrs["reduction"]
        plan = Plan(_copy_data(data.dtype, data.size, info, self.name))
        if idx.size == 0:
            return plan
        flag, ft = add_flag(plan, idx.dtype, out_of_range(self, data.shape[axis], f"axis {axis}"), info)
        istrides, dstrides = contiguous_strides(idx.shape), contiguous_strides(data.shape)
        sizes, (iwalk, dwalk) = _axis_walk(idx.shape, [istrides, dstrides], axis)
        _fits(self, 5 + 3 * len(sizes))
        it, elem = index_dtype(self, idx.dtype), _elem(data.dtype, reduction)
        names = [f"n{d}" for d in range(len(sizes))]
        isn, dsn = [f"i{d}" for d in range(len(sizes))], [f"d{d}" for d in range(len(sizes))]
        lines = math.prod(sizes)
        body = ("    FOR_EACH(l, lines) {\n        int ib = 0; int db = 0;\n"
                + unravel("l", names, [isn, dsn], ["ib", "db"])
                + "        for (int j = 0; j < alen; j++) {\n            int io = ib + j * istride;\n"
                + checked_index("k", "idx[io]", it, "adim", ft, "            ")
                + "            if (k_ok) { int o = db + k * dstride; "
                f"y[o] = {_combine(reduction, data.dtype, 'y[o]', 'u[io]')}; }}\n        }}\n    }}")
        spec = KernelSpec(f"scatter_elements_{reduction}_{elem}_{it}_r{len(sizes)}",
                          (Param("idx", it, "in"), Param("u", "T", "in"), Param("y", "T", "inout"),
                           Param("flag", ft, "out"),
                           *[Param(p, "int", "scalar") for p in ["lines", "alen", "adim", "istride", "dstride",
                                                                 *names, *isn, *dsn]]),
                          body, elem=elem, defines=compute_defines(data.dtype) if reduction != "none" else ())
        plan.steps.append(_launch(spec, (("in", 1), ("in", 2), ("out", 0), flag, lines, idx.shape[axis],
                                         data.shape[axis], istrides[axis], dstrides[axis], *sizes, *iwalk, *dwalk),
                                  lines, info))
        return plan


# -- gather_nd / scatter_nd ---------------------------------------------------------------------------------------
def _nd_message(op: Op, dims: Sequence[int]) -> str:
    return f"{op.name}: index {{value}} is out of range of data dims {tuple(dims)} (indexed by the last axis of indices)"


def _nd_normalized(op: Op, idx: np.ndarray, dims: Sequence[int]) -> np.ndarray:
    """Index tuples ``idx`` (last axis: one entry per dim of ``dims``) with negative entries counted from the end;
    InvalidArgument naming the op and the first bad entry otherwise."""
    idx = np.asarray(idx).astype(np.int64)
    dims_a = np.asarray(dims, np.int64)
    bad = (idx < -dims_a) | (idx >= dims_a)
    if bad.any():
        raise bad_value(_nd_message(op, dims), idx[bad].flat[0])
    return np.where(idx < 0, idx + dims_a, idx)


def _nd_offset(m: int, it: str, ft: str, indent: str = "        ") -> str:
    """Dialect code adding to int ``off`` the offset index tuple ``p`` (``m`` entries in ``idx``) points at, over
    dims ``dimT`` with strides ``strT``; ``ok`` false (and the flag set) when an entry is out of range."""
    code = [f"{indent}bool ok = true;\n"]
    for t in range(m):
        code.append(checked_index(f"k{t}", f"idx[p * {m} + {t}]", it, f"dim{t}", ft, indent))
        code.append(f"{indent}ok = ok && k{t}_ok;\n{indent}off += k{t} * str{t};\n")
    return "".join(code)


def _nd_scalars(m: int) -> list[str]:
    return [f"dim{t}" for t in range(m)] + [f"str{t}" for t in range(m)]


@register
class GatherND(_Indexing):
    """gather_nd(data, indices, batch_dims=0): slices of data at the index tuples of the last axis of indices, the
    first ``batch_dims`` dims shared (ONNX GatherND)."""

    name = "gather_nd"
    min_inputs = max_inputs = 2

    def check(self, inputs, attrs):
        known_attrs(self, attrs, ("batch_dims",))
        data, idx = inputs
        index_dtype(self, idx.dtype)
        b = int_attr(self, attrs, "batch_dims", 0)
        if not idx.shape:
            raise self.error("indices must have rank >= 1")
        m = idx.shape[-1]
        if not 0 <= b < min(len(data.shape), len(idx.shape)):
            raise self.error(f"batch_dims {b} must lie in [0, {min(len(data.shape), len(idx.shape))})")
        if data.shape[:b] != idx.shape[:b]:
            raise self.error(f"the batch dims of data {data.shape[:b]} and indices {idx.shape[:b]} differ")
        if not 1 <= m <= len(data.shape) - b:
            raise self.error(f"the last dim of indices ({m}) must lie in [1, {len(data.shape) - b}] (data rank "
                             f"{len(data.shape)}, batch_dims {b})")
        if m > MAX_DIMS:
            raise self.error(f"index tuples of {m} entries: at most {MAX_DIMS}")
        return {"batch_dims": b}

    def infer(self, inputs, attrs):
        data, idx = inputs
        b, m = attrs["batch_dims"], idx.shape[-1]
        return [TensorType.of(idx.shape[:-1] + data.shape[b + m:], data.dtype)]

    def reference(self, inputs, attrs):
        data, idx = inputs
        b, m = attrs["batch_dims"], idx.shape[-1]
        k = _nd_normalized(self, idx, data.shape[b:b + m])
        batches = math.prod(data.shape[:b])
        dr = data.reshape((batches,) + data.shape[b:])
        kr = k.reshape(batches, -1, m)
        y = dr[(np.arange(batches)[:, None], *[kr[..., t] for t in range(m)])]
        return [y.reshape(self.infer([TensorType(data.shape, data.dtype), TensorType(idx.shape, idx.dtype)],
                                     attrs)[0].shape)]

    def plan(self, inputs, outputs, attrs, info):
        data, idx = inputs
        b, m = attrs["batch_dims"], idx.shape[-1]
        n = outputs[0].size
        plan = Plan([])
        if n == 0:
            return plan
        flag, ft = add_flag(plan, idx.dtype, _nd_message(self, data.shape[b:b + m]), info)
        it, ct = index_dtype(self, idx.dtype), copy_type(data.dtype)
        S = math.prod(data.shape[b + m:])
        per_batch = math.prod(idx.shape[b:-1])
        dstrides = contiguous_strides(data.shape)
        body = ("    FOR_EACH(e, n) {\n        int p = e / S; int s = e - p * S;\n"
                "        int off = (p / per_batch) * bstride + s;\n" + _nd_offset(m, it, ft)
                + "        y[e] = x[ok ? off : 0];\n    }")
        spec = KernelSpec(f"gather_nd_{ct}_{it}_m{m}",
                          (Param("x", ct, "in"), Param("idx", it, "in"), Param("y", ct, "out"), Param("flag", ft, "out"),
                           *[Param(p, "int", "scalar") for p in ["n", "S", "per_batch", "bstride", *_nd_scalars(m)]]),
                          body, elem=ct)
        bstride = math.prod(data.shape[b:])
        plan.steps.append(_launch(spec, (("in", 0), ("in", 1), ("out", 0), flag, n, S, max(per_batch, 1), bstride,
                                         *data.shape[b:b + m], *dstrides[b:b + m]), n, info))
        return plan


@register
class ScatterND(_Indexing):
    """scatter_nd(data, indices, updates, reduction="none"): data with the slices updates[p..] written (or combined:
    add, mul, max, min) at the index tuples indices[p..] (ONNX ScatterND)."""

    name = "scatter_nd"
    min_inputs = max_inputs = 3

    def check(self, inputs, attrs):
        known_attrs(self, attrs, ("reduction",))
        data, idx, upd = inputs
        index_dtype(self, idx.dtype)
        if not idx.shape or not 1 <= idx.shape[-1] <= len(data.shape):
            raise self.error(f"the last dim of indices (shape {idx.shape}) must lie in [1, {len(data.shape)}]")
        m = idx.shape[-1]
        if m > MAX_DIMS:
            raise self.error(f"index tuples of {m} entries: at most {MAX_DIMS}")
        want = idx.shape[:-1] + data.shape[m:]
        if upd.shape != want or upd.dtype != data.dtype:
            raise self.error(f"updates must be {want} {data.dtype}, got {upd.shape} {upd.dtype}")
        return {"reduction": self._reduction(attrs, data.dtype)}

    def infer(self, inputs, attrs):
        return [inputs[0]]

    def reference(self, inputs, attrs):
        data, idx, upd = inputs
        m = idx.shape[-1]
        k = _nd_normalized(self, idx, data.shape[:m])
        out = data.copy()
        _scatter_np(out, tuple(k[..., t] for t in range(m)), upd, attrs["reduction"])
        return [out]

    def plan(self, inputs, outputs, attrs, info):
        data, idx, upd = inputs
        m, reduction = idx.shape[-1], attrs["reduction"]
        plan = Plan(_copy_data(data.dtype, data.size, info, self.name))
        if upd.size == 0:
            return plan
        flag, ft = add_flag(plan, idx.dtype, _nd_message(self, data.shape[:m]), info)
        it, elem = index_dtype(self, idx.dtype), _elem(data.dtype, reduction)
        S, P = math.prod(data.shape[m:]), math.prod(idx.shape[:-1])
        dstrides = contiguous_strides(data.shape)
        if reduction == "none":  # one work item per update element
            body = ("    FOR_EACH(e, n) {\n        int p = e / S; int s = e - p * S;\n        int off = s;\n"
                    + _nd_offset(m, it, ft) + "        if (ok) y[off] = u[e];\n    }")
            count = P * S
        else:  # one work item per slice element, walking every update of it in order
            body = ("    FOR_EACH(s, S) {\n        for (int p = 0; p < P; p++) {\n            int off = s;\n"
                    + _nd_offset(m, it, ft, "            ")
                    + f"            if (ok) y[off] = {_combine(reduction, data.dtype, 'y[off]', 'u[p * S + s]')};\n"
                    "        }\n    }")
            count = S
        spec = KernelSpec(f"scatter_nd_{reduction}_{elem}_{it}_m{m}",
                          (Param("idx", it, "in"), Param("u", "T", "in"), Param("y", "T", "inout"),
                           Param("flag", ft, "out"),
                           *[Param(p, "int", "scalar") for p in ["n", "S", "P", *_nd_scalars(m)]]),
                          body, elem=elem, defines=compute_defines(data.dtype) if reduction != "none" else ())
        plan.steps.append(_launch(spec, (("in", 1), ("in", 2), ("out", 0), flag, P * S, S, P, *data.shape[:m],
                                         *dstrides[:m]), count, info))
        return plan


# -- tensor_scatter -------------------------------------------------------------------------------------------------
@register
class TensorScatter(_Indexing):
    """tensor_scatter(past, update, write_indices=zeros, axis=-2, mode="linear"): past with update written along
    ``axis`` from position write_indices[b] of each batch b (dim 0); ``circular`` wraps positions around the axis
    (ONNX TensorScatter, a key-value cache update)."""

    name = "tensor_scatter"
    min_inputs, max_inputs = 2, 3

    def check(self, inputs, attrs):
        known_attrs(self, attrs, ("axis", "mode"))
        past, upd = inputs[:2]
        rank = len(past.shape)
        if rank < 2:
            raise self.error(f"past must have rank >= 2 (batch first), got shape {past.shape}")
        axis = norm_axis(self, int_attr(self, attrs, "axis", -2), rank)
        if axis == 0:
            raise self.error("axis 0 is the batch: the sequence axis must come after it")
        mode = attrs.get("mode", "linear")
        if mode not in ("linear", "circular"):
            raise self.error(f"mode must be 'linear' or 'circular', got {mode!r}")
        if upd.dtype != past.dtype or len(upd.shape) != rank or any(
                a != b for d, (a, b) in enumerate(zip(upd.shape, past.shape)) if d != axis) \
                or upd.shape[axis] > past.shape[axis]:
            raise self.error(f"update ({upd.shape} {upd.dtype}) must match past ({past.shape} {past.dtype}) outside "
                             f"axis {axis} and be no longer along it")
        if len(inputs) > 2:
            wi = inputs[2]
            index_dtype(self, wi.dtype, "write_indices")
            if wi.shape != (past.shape[0],):
                raise self.error(f"write_indices must have shape ({past.shape[0]},) (one per batch), got {wi.shape}")
        return {"axis": axis, "mode": mode}

    def infer(self, inputs, attrs):
        return [inputs[0]]

    def _message(self, length: int) -> str:
        return f"{self.name}: write position {{value}} is out of range [0, {length}) of the sequence axis"

    def reference(self, inputs, attrs):
        past, upd = inputs[:2]
        axis = attrs["axis"]
        length, seq = past.shape[axis], upd.shape[axis]
        prefix, inner = math.prod(past.shape[:axis]), math.prod(past.shape[axis + 1:])
        starts = inputs[2].astype(np.int64) if len(inputs) > 2 else np.zeros(past.shape[0], np.int64)
        pos = np.repeat(starts, prefix // past.shape[0] if past.shape[0] else 0)[:, None] + np.arange(seq)
        if attrs["mode"] == "circular":
            pos = pos % length if length else pos
        elif pos.size and (pos.min() < 0 or pos.max() >= length):
            bad = pos[(pos < 0) | (pos >= length)].flat[0]
            raise bad_value(self._message(length), bad)
        out = past.copy().reshape(prefix, length, inner)
        out[np.arange(prefix)[:, None], pos] = upd.reshape(prefix, seq, inner)
        return [out.reshape(past.shape)]

    def plan(self, inputs, outputs, attrs, info):
        past, upd = inputs[:2]
        axis = attrs["axis"]
        plan = Plan(_copy_data(past.dtype, past.size, info, self.name))
        if upd.size == 0:
            return plan
        length, seq = past.shape[axis], upd.shape[axis]
        inner = math.prod(past.shape[axis + 1:])
        per_batch = math.prod(past.shape[1:axis])
        given = len(inputs) > 2
        it = index_dtype(self, inputs[2].dtype) if given else "int"
        flag, ft = add_flag(plan, np.dtype(np.int64) if it == "i64" else np.dtype(np.int32), self._message(length),
                            info)
        start = "wi[p / per_batch]" if given else f"CAST({it}, 0)"
        wrap = (f"        w = w < CAST({it}, 0) ? CAST({it}, maxlen - 1) - ((-w - CAST({it}, 1)) % CAST({it}, maxlen))"
                f" : w % CAST({it}, maxlen);\n") if attrs["mode"] == "circular" else ""
        ct = copy_type(past.dtype)
        body = ("    FOR_EACH(e, n) {\n        int r = e % inner; int t = e / inner;\n"
                "        int s = t % seq; int p = t / seq;\n"
                f"        {it} w = {start} + CAST({it}, s);\n" + wrap
                + f"        if (w < CAST({it}, 0) || w >= CAST({it}, maxlen)) {raise_flag('w', ft)}\n"
                "        else y[(p * maxlen + CAST(int, w)) * inner + r] = u[e];\n    }")
        buffers = ([Param("wi", it, "in")] if given else []) + [Param("u", ct, "in"), Param("y", ct, "inout"),
                                                                Param("flag", ft, "out")]
        spec = KernelSpec(f"tensor_scatter_{attrs['mode']}_{ct}_{it if given else 'none'}",
                          (*buffers, *[Param(p, "int", "scalar") for p in ("n", "inner", "seq", "maxlen",
                                                                           "per_batch")]),
                          body, elem=ct)
        n = upd.size
        args = ([("in", 2)] if given else []) + [("in", 1), ("out", 0), flag, n, inner, seq, length,
                                                 max(per_batch, 1)]
        plan.steps.append(_launch(spec, tuple(args), n, info))
        return plan


# -- reverse_sequence ----------------------------------------------------------------------------------------------
@register
class ReverseSequence(_Indexing):
    """reverse_sequence(x, sequence_lens, batch_axis=1, time_axis=0): for each batch b, the first sequence_lens[b]
    steps along the time axis reversed, the rest kept (ONNX ReverseSequence)."""

    name = "reverse_sequence"
    min_inputs = max_inputs = 2

    def check(self, inputs, attrs):
        known_attrs(self, attrs, ("batch_axis", "time_axis"))
        x, lens = inputs
        if len(x.shape) < 2:
            raise self.error(f"needs an input of rank 2 or more, got shape {x.shape}")
        b = int_attr(self, attrs, "batch_axis", 1)
        t = int_attr(self, attrs, "time_axis", 0)
        if {b, t} != {0, 1}:
            raise self.error(f"batch_axis and time_axis must be 0 and 1 (either way), got {b} and {t}")
        index_dtype(self, lens.dtype, "sequence_lens")
        if lens.shape != (x.shape[b],):
            raise self.error(f"sequence_lens must have shape ({x.shape[b]},) (one per batch), got {lens.shape}")
        return {"batch_axis": b, "time_axis": t}

    def infer(self, inputs, attrs):
        return [inputs[0]]

    def _message(self, steps: int) -> str:
        return f"{self.name}: sequence length {{value}} is out of range [0, {steps}] of the time axis"

    def reference(self, inputs, attrs):
        x, lens = inputs
        b, t = attrs["batch_axis"], attrs["time_axis"]
        steps = x.shape[t]
        lens = lens.astype(np.int64)
        bad = (lens < 0) | (lens > steps)
        if bad.any():
            raise bad_value(self._message(steps), lens[bad][0])
        tt = np.arange(steps)[:, None]  # (time, batch)
        src = np.where(tt < lens[None, :], lens[None, :] - 1 - tt, tt)
        if b == 0:
            src = src.T
        src = src.reshape(src.shape + (1,) * (x.ndim - 2))
        return [np.take_along_axis(x, np.broadcast_to(src, x.shape), axis=t)]

    def plan(self, inputs, outputs, attrs, info):
        x, lens = inputs
        plan = Plan([])
        if x.size == 0:
            return plan
        b = attrs["batch_axis"]
        steps = x.shape[attrs["time_axis"]]
        lt = index_dtype(self, lens.dtype)
        flag, ft = add_flag(plan, lens.dtype, self._message(steps), info)
        ct = copy_type(x.dtype)
        bt = "int bb = c0; int tt = c1;" if b == 0 else "int bb = c1; int tt = c0;"
        src = "(bb * d1 + st)" if b == 0 else "(st * d1 + bb)"
        body = ("    FOR_EACH(i, n) {\n        int r = i % inner; int q = i / inner;\n"
                f"        int c1 = q % d1; int c0 = q / d1; {bt}\n"
                f"        {lt} len = lens[bb];\n"
                f"        if (len < CAST({lt}, 0) || len > CAST({lt}, steps)) {{ {raise_flag('len', ft)} len = CAST({lt}, 0); }}\n"
                "        int L = CAST(int, len);\n        int st = tt < L ? L - 1 - tt : tt;\n"
                f"        y[i] = x[{src} * inner + r];\n    }}")
        spec = KernelSpec(f"reverse_sequence_b{b}_{ct}_{lt}",
                          (Param("x", ct, "in"), Param("lens", lt, "in"), Param("y", ct, "out"),
                           Param("flag", ft, "out"),
                           *[Param(p, "int", "scalar") for p in ("n", "inner", "d1", "steps")]),
                          body, elem=ct)
        n = x.size
        plan.steps.append(_launch(spec, (("in", 0), ("in", 1), ("out", 0), flag, n, math.prod(x.shape[2:]),
                                         x.shape[1], steps), n, info))
        return plan

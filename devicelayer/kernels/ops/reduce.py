"""Reductions over any set of axes: sum, mean, reduce_max, reduce_min, reduce_prod, reduce_l1, reduce_l2,
reduce_sum_square, reduce_log_sum, reduce_log_sum_exp (ONNX semantics).

The reduced and kept dimensions are each collapsed to the fewest (size, stride)
pairs that walk them, passed as int scalars.  Short reductions run one work
item per output element; long ones one work-group per output element, each
item striding over the reduction and the group combining partials in shared
memory (``group_reduce``, also used by the normalization ops).

Values are combined in a compute type (``compute_type``): floats in ACC (float
for half), integers exactly in their own width (int or uint for narrower ones,
so a result wraps as the element type would), bool as uint.  A reduction over
no elements gives the identity of its combination (0 for sum, -inf for max, the
smallest integer for an integer max, false for a bool max ...).
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Sequence

import numpy as np

from ...dtypes import is_float
from ...errors import UnsupportedOp
from ...info import DeviceInfo
from ..dialect import FROM_DTYPE, TYPES, KernelSpec, Param, dialect_type
from ..op import Launch, Op, Plan, TensorType, groups_for, local_1d, register
from ..render import lacks
from .binary import INT_MAX, collapse, contiguous_strides, unravel

#: a reduction at least this long gets a work-group per output element
GROUP_THRESHOLD = 128
#: most int scalars a kernel takes (GLSL push constants)
MAX_SCALARS = 24


def acc_type(elem: str) -> str:
    """The dialect type of ACC for an element type (what shared memory of partials holds)."""
    return "f64" if elem == "f64" else "float"


def group_local(info: DeviceInfo, want: int = 256) -> int:
    """A power-of-two work-group size the device takes (tree reductions need one)."""
    local = local_1d(info, want)
    return 1 << (local.bit_length() - 1)


def group_reduce(var: str, combine: Callable[[str, str], str], shared: str = "red", indent: str = "        ",
                 lanes: int | None = None) -> str:
    """Dialect code combining every item's ``var`` across the work-group; all items get the result.  With
    ``lanes`` (a power of two dividing the group size), across each run of ``lanes`` adjacent items instead
    (``LID(0) % lanes`` is the item's lane): each run gets its own result.

    Needs ``shared`` (LSIZE(0) ACCs) declared in the spec and a power-of-two group size; every
    item of the group must reach it.
    """
    i = indent
    width, lane, first = ("LSIZE(0)", "LID(0)", "0") if lanes is None else \
        (str(lanes), f"(LID(0) % {lanes})", f"LID(0) - LID(0) % {lanes}")
    return (f"{i}{shared}[LID(0)] = {var};\n{i}BARRIER();\n"
            f"{i}for (int dl_s = {width} / 2; dl_s > 0; dl_s = dl_s / 2) {{\n"
            f"{i}    if ({lane} < dl_s) {shared}[LID(0)] = "
            f"{combine(f'{shared}[LID(0)]', f'{shared}[LID(0) + dl_s]')};\n"
            f"{i}    BARRIER();\n{i}}}\n"
            f"{i}{var} = {shared}[{first}];\n{i}BARRIER();\n")


def add(a: str, b: str) -> str:
    return f"({a} + {b})"


def fmax(a: str, b: str) -> str:
    return f"dl_max({a}, {b})"


def fmin(a: str, b: str) -> str:
    return f"dl_min({a}, {b})"


def int_attr(op: Op, attrs: dict[str, Any], name: str, default: int | None = None) -> int:
    value = attrs.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise op.error(f"attribute {name!r} must be an int, got {value!r}")
    return int(value)


def float_attr(op: Op, attrs: dict[str, Any], name: str, default: float) -> float:
    value = attrs.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not np.isfinite(float(value)):
        raise op.error(f"attribute {name!r} must be a finite number, got {value!r}")
    return float(value)


def bool_attr(op: Op, attrs: dict[str, Any], name: str, default: bool) -> bool:
    value = attrs.get(name, default)
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer)) and value in (0, 1)):
        return bool(value)
    raise op.error(f"attribute {name!r} must be a bool, got {value!r}")


def known_attrs(op: Op, attrs: dict[str, Any], known: Sequence[str]) -> None:
    extra = set(attrs) - set(known)
    if extra:
        raise op.error(f"unknown attribute(s) {sorted(extra)}; it takes {sorted(known) or 'none'}")


def norm_axis(op: Op, axis: Any, rank: int, what: str = "axis") -> int:
    """``axis`` in [-rank, rank) as a non-negative int."""
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise op.error(f"{what} must be an int, got {axis!r}")
    if not -rank <= int(axis) < rank:
        raise op.error(f"{what} {axis} is out of range for a rank-{rank} input")
    return int(axis) % rank


def float_input(op: Op, t: TensorType, what: str = "input") -> None:
    if t.dtype.kind != "f":
        raise op.error(f"needs a floating-point {what}, got {t.dtype}")


#: integer dtype names (kernels compute them exactly)
INT_DTYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})
#: float dtype names
FLOAT_DTYPES = frozenset({"float16", "float32", "float64"})


def compute_type(dtype: Any) -> str:
    """The dialect type values of ``dtype`` are combined in: ACC for floats, integers in their own width (int or
    uint when narrower), bool as uint."""
    dtype = np.dtype(dtype)
    if is_float(dtype):  # (float8 and float4, which only the host stores, in float too)
        return acc_type(dialect_type(dtype)) if dtype.name in FROM_DTYPE else "float"
    if dtype.kind == "b":
        return "uint"
    if dtype.kind == "u":
        return "u64" if dtype.itemsize == 8 else "uint"
    return "i64" if dtype.itemsize == 8 else "int"


def compute_dtype(dtype: Any) -> np.dtype:
    """The NumPy dtype of ``compute_type(dtype)`` (what the NumPy references compute in; float32 for
    bfloat16)."""
    if np.dtype(dtype).name == "bfloat16":
        return np.dtype(np.float32)
    return np.dtype(TYPES[compute_type(dtype)])


def compute_defines(dtype: Any) -> tuple[tuple[str, str], ...]:
    """Kernel defines of ``RT`` (the compute type), ``TO_RT(v)`` (an element to RT) and ``FROM_RT(v)`` (back)."""
    rt = compute_type(dtype)
    if is_float(dtype):
        return (("RT", rt), ("TO_RT(v)", "TO_ACC(v)"), ("FROM_RT(v)", "FROM_ACC(v)"))
    return (("RT", rt), ("TO_RT(v)", f"CAST({rt}, v)"), ("FROM_RT(v)", "CAST(T, v)"))


def literal(value: float | int, rt: str) -> str:
    """A dialect expression of type ``rt`` for ``value`` (infinities for floats; any 64-bit integer)."""
    if rt in ("float", "f64", "f16", "bf16"):
        value = float(value)
        if np.isinf(value):
            return f"CAST({rt}, {'-' if value < 0 else ''}DL_INF)"
        return f"CAST({rt}, {value!r})"
    value = int(value)
    if -2**31 < value < 2**31:
        return f"CAST({rt}, {value})"
    if value == -2**31:
        return f"CAST({rt}, (-2147483647 - 1))"
    if 0 <= value < 2**32:
        return f"CAST({rt}, {value}u)"
    bits = value & (2**64 - 1)
    return f"CAST({rt}, (CAST(u64, {bits >> 32}u) << 32) | CAST(u64, {bits & 0xFFFFFFFF}u))"


def lowest(dtype: Any) -> float | int:
    """The smallest value of ``dtype`` (-inf for floats, 0 for bool)."""
    dtype = np.dtype(dtype)
    if is_float(dtype):
        return -np.inf
    return 0 if dtype.kind == "b" else int(np.iinfo(dtype).min)


def highest(dtype: Any) -> float | int:
    """The largest value of ``dtype`` (inf for floats, 1 for bool)."""
    dtype = np.dtype(dtype)
    if is_float(dtype):
        return np.inf
    return 1 if dtype.kind == "b" else int(np.iinfo(dtype).max)


def larger(a: str, b: str, dtype: Any) -> str:
    """Dialect expression of the larger of ``a``, ``b`` (values of ``dtype`` in its compute type; NaN wins)."""
    return fmax(a, b) if np.dtype(dtype).kind == "f" else f"({a} > {b} ? {a} : {b})"


def smaller(a: str, b: str, dtype: Any) -> str:
    """Dialect expression of the smaller of ``a``, ``b`` (values of ``dtype`` in its compute type; NaN wins)."""
    return fmin(a, b) if np.dtype(dtype).kind == "f" else f"({a} < {b} ? {a} : {b})"


class Reduce(Op):
    """y = reduction of x over ``axes`` (None: all; negative counts from the end), ``keepdims`` keeps them as 1.

    A subclass says how elements are combined: ``identity`` (the result of reducing nothing, before ``final``),
    ``pre`` (each element mapped first), ``combine``, ``final`` (the accumulator to the result); each in the
    dialect on compute-type values and in NumPy (``np_reduce``).
    """

    kernel_dtypes = FLOAT_DTYPES | INT_DTYPES
    #: ``identity`` of the shift pass that ``reduce_log_sum_exp`` makes first (the maximum)
    shifted = False

    def identity(self, dtype: np.dtype) -> float | int:
        return 0

    def pre(self, v: str, dtype: np.dtype) -> str:
        """Dialect expression of element ``v`` (RT) before it is combined."""
        return v

    def combine(self, a: str, b: str, dtype: np.dtype) -> str:
        return add(a, b)

    def final(self, acc: str, dtype: np.dtype) -> str:
        """RT expression of the result from the accumulator (``K`` is the reduction length, ``sh`` the shift)."""
        return acc

    def np_reduce(self, w: np.ndarray, axes: tuple[int, ...], keepdims: bool, dtype: np.dtype) -> np.ndarray:
        """The reduction in NumPy on ``w`` (an input of ``dtype`` in its compute dtype)."""
        return np.add.reduce(w, axis=axes, keepdims=keepdims)

    def check(self, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> dict[str, Any]:
        known_attrs(self, attrs, ("axes", "keepdims"))
        x = inputs[0]
        bf16 = x.dtype.name == "bfloat16" and "float32" in self.kernel_dtypes  # host storage, float32 arithmetic
        if x.dtype.name not in self.kernel_dtypes and not bf16:
            if x.dtype.kind in "iu":
                raise UnsupportedOp(f"{self.name} of {x.dtype} is not supported (it takes "
                                    f"{', '.join(sorted(self.kernel_dtypes))})")
            raise self.error(f"needs a {'numeric' if 'bool' not in self.kernel_dtypes else 'numeric or bool'} "
                             f"input, got {x.dtype}")
        rank = len(x.shape)
        axes = attrs.get("axes")
        if axes is None:
            axes = tuple(range(rank))
        else:
            if isinstance(axes, (int, np.integer)) and not isinstance(axes, bool):
                axes = (axes,)
            if not isinstance(axes, (list, tuple)):
                raise self.error(f"axes must be None, an int or a sequence of ints, got {axes!r}")
            axes = tuple(norm_axis(self, a, rank, "axes entry") for a in axes)
            if len(set(axes)) != len(axes):
                raise self.error(f"axes {attrs['axes']!r} name an axis twice")
            axes = tuple(sorted(axes))
        keepdims = bool_attr(self, attrs, "keepdims", False)
        return {"axes": axes, "keepdims": keepdims}

    def infer(self, inputs, attrs):
        x = inputs[0]
        axes = attrs["axes"]
        if attrs["keepdims"]:
            shape = tuple(1 if d in axes else s for d, s in enumerate(x.shape))
        else:
            shape = tuple(s for d, s in enumerate(x.shape) if d not in axes)
        return [TensorType(shape, x.dtype)]

    def reference(self, inputs, attrs):
        x = inputs[0]
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            y = self.np_reduce(x.astype(compute_dtype(x.dtype), copy=False), attrs["axes"], attrs["keepdims"], x.dtype)
        return [np.asarray(y).astype(x.dtype)]

    def _layout(self, x: TensorType, axes: tuple[int, ...]) -> tuple[list[int], list[int], list[int], list[int]]:
        strides = contiguous_strides(x.shape)
        kept = [d for d in range(len(x.shape)) if d not in axes]
        kn, (ks,) = collapse([x.shape[d] for d in kept], [[strides[d] for d in kept]])
        rn, (rs,) = collapse([x.shape[d] for d in axes], [[strides[d] for d in axes]])
        return kn, ks, rn, rs

    def _code(self, dtype: np.dtype) -> str:
        """Every piece of dialect code the kernel uses (what ``render.lacks`` is asked about)."""
        return self.pre("v", dtype) + self.combine("a", "b", dtype) + self.final("acc", dtype)

    def unsupported(self, inputs, attrs, info):
        why = super().unsupported(inputs, attrs, info)
        if why is None and info.kernel_language != "python":
            x = inputs[0]
            why = lacks(self._code(x.dtype), info.kernel_language, dialect_type(x.dtype))
            if why is not None:
                return f"{self.name} of {x.dtype}: {why}"
            if x.size > INT_MAX:
                return f"{self.name}: tensors of {x.size} elements exceed the kernels' int32 indexing"
            kn, _, rn, _ = self._layout(x, attrs["axes"])
            if 2 + 2 * (len(kn) + len(rn)) > MAX_SCALARS:
                return f"{self.name}: the reduction's layout needs too many dimensions"
        return why

    def plan(self, inputs, outputs, attrs, info):
        x, out = inputs[0], outputs[0]
        dtype = x.dtype
        elem, rt = dialect_type(dtype), compute_type(dtype)
        kn, ks, rn, rs = self._layout(x, attrs["axes"])
        M = out.size
        K = int(np.prod([x.shape[a] for a in attrs["axes"]], dtype=np.int64))
        kn_names = [f"kn{d}" for d in range(len(kn))]
        ks_names = [f"ks{d}" for d in range(len(kn))]
        rn_names = [f"rn{d}" for d in range(len(rn))]
        rs_names = [f"rs{d}" for d in range(len(rn))]
        grouped = K >= GROUP_THRESHOLD

        def comb(a: str, b: str) -> str:
            return self.combine(a, b, dtype)

        if grouped:
            local = group_local(info)
            head = ("    for (int o = GROUP(0); o < M; o += NGROUPS(0)) {\n        int base = 0;\n"
                    + unravel("o", kn_names, [ks_names], ["base"]))
            loop = "        for (int k = LID(0); k < K; k += LSIZE(0)) {\n            int off = base;\n"
            write = "        if (LID(0) == 0) "
            gsize = groups_for(M * local, local, info)
        else:
            local = local_1d(info)
            head = ("    FOR_EACH(o, M) {\n        int base = 0;\n"
                    + unravel("o", kn_names, [ks_names], ["base"]))
            loop = "        for (int k = 0; k < K; k++) {\n            int off = base;\n"
            write = "        "
            gsize = groups_for(M, local, info)
        loop += unravel("k", rn_names, [rs_names], ["off"], "            ") + "            RT v = TO_RT(x[off]);\n"
        body = [head]
        if self.shifted:  # the maximum first: the shift keeping exp() in range
            body.append(f"        RT m = {literal(-np.inf, rt)};\n" + loop + f"            m = {fmax('m', 'v')};\n"
                        "        }\n")
            if grouped:
                body.append(group_reduce("m", fmax))
            body.append("        RT sh = dl_isinf(m) ? CAST(RT, 0) : m;\n")
        body.append(f"        RT acc = {literal(self.identity(dtype), rt)};\n" + loop
                    + f"            acc = {comb('acc', self.pre('v', dtype))};\n        }}\n")
        if grouped:
            body.append(group_reduce("acc", comb))
        body.append(f"{write}y[o] = FROM_RT({self.final('acc', dtype)});\n    }}")
        params = (Param("x", "T", "in"), Param("y", "T", "out"), Param("M", "int", "scalar"),
                  Param("K", "int", "scalar"),
                  *[Param(n, "int", "scalar") for n in kn_names + ks_names + rn_names + rs_names])
        variant = f"g{local}" if grouped else "l"
        spec = KernelSpec(f"{self.name}_{elem}_{variant}_k{len(kn)}_r{len(rn)}", params, "".join(body), elem=elem,
                          shared=((rt, "red", local),) if grouped else (), local_size=(local,),
                          defines=compute_defines(dtype))
        args = (("in", 0), ("out", 0), M, K, *kn, *ks, *rn, *rs)
        return Plan([Launch(spec, args, gsize, (local,))])


@register
class Sum(Reduce):
    """Sum over axes; an empty reduction gives 0."""

    name = "sum"


@register
class Mean(Reduce):
    """Mean over axes (integers: the sum divided by the count, toward zero); an empty reduction gives NaN (0 for
    integers)."""

    name = "mean"

    def final(self, acc, dtype):
        if dtype.kind == "f":
            return f"(K > 0 ? {acc} / CAST(RT, K) : CAST(RT, DL_NAN))"
        if dtype.kind == "u":
            return f"(K > 0 ? {acc} / CAST(RT, K) : CAST(RT, 0))"
        return f"(K > 0 ? ({acc} < CAST(RT, 0) ? -((-{acc}) / CAST(RT, K)) : {acc} / CAST(RT, K)) : CAST(RT, 0))"

    def np_reduce(self, w, axes, keepdims, dtype):
        s = np.add.reduce(w, axis=axes, keepdims=keepdims)
        k = int(np.prod([w.shape[a] for a in axes], dtype=np.int64))
        if w.dtype.kind == "f":
            return s / w.dtype.type(k) if k else np.full_like(s, np.nan)
        if not k:
            return np.zeros_like(s)
        return np.where(s < 0, -(-s // k), s // k).astype(w.dtype) if w.dtype.kind == "i" else s // k


@register
class ReduceMax(Reduce):
    """Maximum over axes (NaN propagates; bool: any); an empty reduction gives the lowest value of the dtype."""

    name = "reduce_max"
    kernel_dtypes = Reduce.kernel_dtypes | {"bool"}

    def identity(self, dtype):
        return lowest(dtype)

    def combine(self, a, b, dtype):
        return larger(a, b, dtype)

    def np_reduce(self, w, axes, keepdims, dtype):
        return np.maximum.reduce(w, axis=axes, keepdims=keepdims, initial=lowest(dtype))


@register
class ReduceMin(Reduce):
    """Minimum over axes (NaN propagates; bool: all); an empty reduction gives the highest value of the dtype."""

    name = "reduce_min"
    kernel_dtypes = Reduce.kernel_dtypes | {"bool"}

    def identity(self, dtype):
        return highest(dtype)

    def combine(self, a, b, dtype):
        return smaller(a, b, dtype)

    def np_reduce(self, w, axes, keepdims, dtype):
        return np.minimum.reduce(w, axis=axes, keepdims=keepdims, initial=highest(dtype))


@register
class ReduceProd(Reduce):
    """Product over axes; an empty reduction gives 1."""

    name = "reduce_prod"

    def identity(self, dtype):
        return 1

    def combine(self, a, b, dtype):
        return f"({a} * {b})"

    def np_reduce(self, w, axes, keepdims, dtype):
        return np.multiply.reduce(w, axis=axes, keepdims=keepdims)


@register
class ReduceL1(Reduce):
    """Sum of absolute values over axes; an empty reduction gives 0."""

    name = "reduce_l1"

    def pre(self, v, dtype):
        if dtype.kind == "f":
            return f"dl_abs({v})"
        return v if dtype.kind == "u" else f"({v} < CAST(RT, 0) ? -{v} : {v})"

    def np_reduce(self, w, axes, keepdims, dtype):
        return np.add.reduce(np.abs(w), axis=axes, keepdims=keepdims)


@register
class ReduceSumSquare(Reduce):
    """Sum of squares over axes; an empty reduction gives 0."""

    name = "reduce_sum_square"

    def pre(self, v, dtype):
        return f"({v} * {v})"

    def np_reduce(self, w, axes, keepdims, dtype):
        return np.add.reduce(w * w, axis=axes, keepdims=keepdims)


@register
class ReduceL2(Reduce):
    """Square root of the sum of squares over axes (floats); an empty reduction gives 0."""

    name = "reduce_l2"
    kernel_dtypes = FLOAT_DTYPES

    def pre(self, v, dtype):
        return f"({v} * {v})"

    def final(self, acc, dtype):
        return f"dl_sqrt({acc})"

    def np_reduce(self, w, axes, keepdims, dtype):
        return np.sqrt(np.add.reduce(w * w, axis=axes, keepdims=keepdims))


@register
class ReduceLogSum(Reduce):
    """Log of the sum over axes (floats); an empty reduction gives -inf."""

    name = "reduce_log_sum"
    kernel_dtypes = FLOAT_DTYPES

    def final(self, acc, dtype):
        return f"dl_log({acc})"

    def np_reduce(self, w, axes, keepdims, dtype):
        return np.log(np.add.reduce(w, axis=axes, keepdims=keepdims))


@register
class ReduceLogSumExp(Reduce):
    """log(sum(exp(x))) over axes (floats), computed as m + log(sum(exp(x - m))) with m the maximum (0 when it is
    infinite); an empty reduction gives -inf."""

    name = "reduce_log_sum_exp"
    kernel_dtypes = FLOAT_DTYPES
    shifted = True

    def pre(self, v, dtype):
        return f"dl_exp({v} - sh)"

    def final(self, acc, dtype):
        return f"(sh + dl_log({acc}))"

    def np_reduce(self, w, axes, keepdims, dtype):
        m = np.maximum.reduce(w, axis=axes, keepdims=True, initial=-np.inf)
        sh = np.where(np.isinf(m), 0, m).astype(w.dtype)
        y = sh + np.log(np.add.reduce(np.exp(w - sh), axis=axes, keepdims=True))
        return y if keepdims else y.reshape([n for d, n in enumerate(w.shape) if d not in axes])

"""Binary (and ternary) elementwise ops with NumPy broadcasting: add, sub, mul, div, mod, pow, max, min, where,
prelu (comparisons, logic and bitwise ops, built on the same kernel, are in ``logic``).

Each op's math is one dialect expression per kind of operand (``va``, ``vb`` the
operands) and one NumPy function; integer division, remainder and power are
exact integer code on every integer dtype.  Broadcasting is done by index
arithmetic: the output shape and every input's broadcast strides (0 along broadcast dimensions) are collapsed to the
fewest dimensions that describe them, and passed as int scalars; the rank is
structural (one kernel per rank, 1 to 6).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np

from ...dtypes import EXTRA_FLOATS, is_number
from ...info import DeviceInfo
from ..dialect import KernelSpec, Param, dialect_type
from ..op import Launch, Op, Plan, TensorType, groups_for, kernel_takes, local_1d, parallel, register, splits
from ..render import lacks
from .numeric import KERNEL_DTYPES, SIGNED_TYPES, computable, describe_kinds, kind_of, wide, wide_unsigned

#: the most dimensions a broadcast kernel takes (after collapsing): 6 sizes + 3 x 6 strides = 24 push constants
MAX_RANK = 6
INT_MAX = 2**31 - 1


# -- shared index helpers (also used by reduce and normalization) ---------------------------------------------
def contiguous_strides(shape: Sequence[int]) -> list[int]:
    """Row-major element strides of ``shape``."""
    strides, step = [], 1
    for s in reversed(shape):
        strides.append(step)
        step *= max(int(s), 1)
    return strides[::-1]


def broadcast_strides(shape: Sequence[int], out_shape: Sequence[int]) -> list[int]:
    """Element strides of a contiguous ``shape`` read as ``out_shape`` (0 along broadcast dimensions)."""
    pad = len(out_shape) - len(shape)
    full = [1] * pad + list(shape)
    strides = [0] * pad + contiguous_strides(shape)
    return [0 if full[d] == 1 and out_shape[d] != 1 else strides[d] for d in range(len(out_shape))]


def collapse(shape: Sequence[int], strides: Sequence[Sequence[int]]) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dimensions and merge neighbours every stride list walks contiguously.

    Returns (sizes, per-list strides); at least one dimension (size 1, strides 0) when nothing is left.
    """
    dims = [d for d in range(len(shape)) if shape[d] != 1]
    sizes: list[int] = []
    out: list[list[int]] = [[] for _ in strides]
    for d in dims:
        if sizes and all(st[-1] == s[d] * shape[d] for st, s in zip(out, strides)):
            sizes[-1] *= shape[d]
            for st, s in zip(out, strides):
                st[-1] = s[d]
            continue
        sizes.append(int(shape[d]))
        for st, s in zip(out, strides):
            st.append(int(s[d]))
    if not sizes:
        return [1], [[0] for _ in strides]
    return sizes, out


def unravel(index: str, sizes: Sequence[str], strides: Sequence[Sequence[str]], offsets: Sequence[str],
            indent: str = "        ") -> str:
    """Dialect code adding to each ``offsets[j]`` the offset of flat ``index`` over row-major ``sizes``,
    walking with ``strides[j]`` (names of int scalars or literals)."""
    if not sizes:
        return ""
    if len(sizes) == 1:
        return "".join(f"{indent}{o} += {index} * {st[0]};\n" for o, st in zip(offsets, strides))
    lines = [f"{indent}{{\n{indent}    int dl_r = {index};\n{indent}    int dl_c;\n"]
    for d in range(len(sizes) - 1, 0, -1):
        lines.append(f"{indent}    dl_c = dl_r % {sizes[d]};\n{indent}    dl_r = dl_r / {sizes[d]};\n")
        lines.extend(f"{indent}    {o} += dl_c * {st[d]};\n" for o, st in zip(offsets, strides))
    lines.extend(f"{indent}    {o} += dl_r * {st[0]};\n" for o, st in zip(offsets, strides))
    lines.append(f"{indent}}}\n")
    return "".join(lines)


def check_dtype_same(op: Op, inputs: Sequence[TensorType], names: Sequence[str]) -> None:
    """Refuse operands of differing dtypes, naming them."""
    first = inputs[0].dtype
    for t, n in zip(inputs[1:], names[1:]):
        if t.dtype != first:
            raise op.error(f"operands must have the same dtype; {names[0]} is {first} and {n} is {t.dtype} "
                           "(cast one first)")


def broadcast_shape(op: Op, shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """NumPy's broadcast of ``shapes``; InvalidArgument naming the op when they do not broadcast."""
    try:
        return tuple(int(s) for s in np.broadcast_shapes(*shapes))
    except ValueError:
        raise op.error(f"shapes {' and '.join(str(tuple(s)) for s in shapes)} do not broadcast") from None


def no_attrs(op: Op, attrs: dict[str, Any]) -> None:
    if attrs:
        raise op.error(f"unknown attribute(s) {sorted(attrs)}; it takes none")


def _too_big(types: Sequence[TensorType]) -> str | None:
    for t in types:
        if t.size > INT_MAX:
            return f"tensors of {t.size} elements exceed the kernels' int32 indexing"
    return None


# -- the broadcast kernel ----------------------------------------------------------------------------------------
def _broadcast_plan(op: Op, inputs: Sequence[TensorType], out: TensorType, info: DeviceInfo,
                    buffers: Sequence[tuple[str, str]], out_type: str, elem: str, compute: str, tag: str) -> Plan:
    """One launch computing ``y[i] = compute`` where the inputs are loaded as ``v<j>`` from ``buffers`` (name, type)."""
    strides = [broadcast_strides(t.shape, out.shape) for t in inputs]
    sizes, walks = collapse(out.shape, strides)
    rank = len(sizes)
    size_names = [f"n{d}" for d in range(rank)]
    stride_names = [[f"s{j}_{d}" for d in range(rank)] for j in range(len(inputs))]
    offsets = [f"o{j}" for j in range(len(inputs))]
    body = [f"    int n = {' * '.join(size_names)};\n", "    FOR_EACH(i, n) {\n"]
    body.extend(f"        int {o} = 0;\n" for o in offsets)
    body.append(unravel("i", size_names, stride_names, offsets))
    body.append(compute)
    body.append("    }")
    params = [Param(name, typ, "in") for name, typ in buffers] + [Param("y", out_type, "out")]
    params += [Param(n, "int", "scalar") for n in size_names]
    params += [Param(n, "int", "scalar") for names in stride_names for n in names]
    spec = KernelSpec(f"{op.name}_{tag}_r{rank}", tuple(params), "".join(body), elem=elem)
    args: list[Any] = [("in", j) for j in range(len(inputs))] + [("out", 0)] + sizes
    args += [s for walk in walks for s in walk]
    local = local_1d(info)
    return Plan([Launch(spec, tuple(args), groups_for(out.size, local, info), (local,))])


def _collapsed_rank(inputs: Sequence[TensorType], out: TensorType) -> int:
    return len(collapse(out.shape, [broadcast_strides(t.shape, out.shape) for t in inputs])[0])


def broadcast_unsupported(op: Op, inputs: Sequence[TensorType], out: TensorType) -> str | None:
    """Why the broadcast kernel cannot take these tensors (int32 indexing, too many dimensions); None if it can."""
    why = _too_big([*inputs, out])
    if why is None and _collapsed_rank(inputs, out) > MAX_RANK:
        why = f"{op.name}: broadcast needs more than {MAX_RANK} dimensions"
    return why


def store(value: str, kind: str, predicate: bool) -> str:
    """The statement writing ``value`` (a dialect expression) to ``y[i]``: a bool as 0/1, a float from ACC, an
    integer converted to T."""
    if predicate:
        return f"        y[i] = ({value}) ? CAST(uchar, 1) : CAST(uchar, 0);\n"
    if kind == "f":
        return f"        y[i] = FROM_ACC({value});\n"
    return f"        y[i] = CAST(T, {value});\n"


class Binary(Op):
    """y = f(a, b) with NumPy broadcasting; both operands of one dtype.

    The math is a dialect expression per kind of operand: ``expr`` for floats (``va``, ``vb`` as ACC),
    ``int_expr`` for integers and ``bool_expr`` for bools (``va``, ``vb`` as T); an empty one means the op does
    not take that kind.  A ``predicate`` gives a bool output.
    """

    min_inputs = 2
    max_inputs = 2
    pointwise = True
    in_place = True  # (one ufunc, or the result computed apart and then copied)
    expr: str = ""
    int_expr: str = ""
    bool_expr: str = ""
    predicate: bool = False
    #: the NumPy form (a ufunc writes straight into the output); None where ``compute_numpy`` is overridden
    numpy: Callable[..., np.ndarray] | None = None
    kernel_dtypes = KERNEL_DTYPES

    @property
    def kinds(self) -> str:
        """The kinds of operand the op takes ("f", "i", "b"); ops whose ``compute`` writes the code set it."""
        return "".join(k for k, e in (("f", self.expr), ("i", self.int_expr), ("b", self.bool_expr)) if e)

    def attributes(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """The op's attributes checked, defaults filled (none by default)."""
        no_attrs(self, attrs)
        return {}

    def check_kind(self, dtype: np.dtype) -> None:
        if kind_of(dtype) not in self.kinds:
            raise self.error(f"needs {describe_kinds(self.kinds)} operands, got {dtype}")

    def check(self, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = self.attributes(attrs)
        check_dtype_same(self, inputs, ("a", "b"))
        self.check_kind(inputs[0].dtype)
        broadcast_shape(self, [t.shape for t in inputs])
        return attrs

    def out_dtype(self, inputs: Sequence[TensorType]) -> np.dtype:
        return np.dtype(bool) if self.predicate else inputs[0].dtype

    def infer(self, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        return [TensorType(broadcast_shape(self, [t.shape for t in inputs]), self.out_dtype(inputs))]

    def compute_numpy(self, a: np.ndarray, b: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
        """The op in NumPy on computable operands (``numeric.computable``)."""
        return self.numpy(a, b)

    def reference(self, inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        out = self.out_dtype([TensorType(x.shape, x.dtype) for x in inputs])
        with np.errstate(all="ignore"):
            y = self.compute_numpy(*[computable(x) for x in inputs], attrs)
            return [np.asarray(y).astype(out, copy=False)]

    def reference_into(self, inputs, outputs, attrs):
        if not isinstance(self.numpy, np.ufunc) or outputs[0].ndim == 0 or \
                any(x.dtype.name in EXTRA_FLOATS for x in inputs):
            return super().reference_into(inputs, outputs, attrs)
        broadcast_into(self.numpy, inputs, outputs[0])
        return None

    def bind_into(self, inputs, outputs, attrs):
        out = outputs[0]
        if not isinstance(self.numpy, np.ufunc) or out.ndim == 0 or any(x.dtype.name in EXTRA_FLOATS for x in inputs) \
                or splits(max(out.shape), out.nbytes * (1 + len(inputs))):
            return super().bind_into(inputs, outputs, attrs)
        return functools.partial(self.numpy, *inputs, out=out)

    def unsupported(self, inputs: Sequence[TensorType], attrs: dict[str, Any], info: DeviceInfo) -> str | None:
        why = super().unsupported(inputs, attrs, info)
        if why is None and info.kernel_language != "python":
            why = lacks(self.compute(inputs, attrs), info.kernel_language, dialect_type(inputs[0].dtype))
            if why is None:
                why = broadcast_unsupported(self, inputs, self.infer(inputs, attrs)[0])
        return why

    def compute(self, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> str:
        """Dialect statements setting ``y[i]`` from ``p0[o0]`` and ``p1[o1]``."""
        kind = kind_of(inputs[0].dtype)
        if kind == "f":
            load, value = "        ACC va = TO_ACC(p0[o0]);\n        ACC vb = TO_ACC(p1[o1]);\n", self.expr
        else:
            load = "        T va = p0[o0];\n        T vb = p1[o1];\n"
            value = self.int_expr if kind == "i" else self.bool_expr
        return load + store(value, kind, self.predicate)

    def buffers(self, inputs: Sequence[TensorType]) -> tuple[tuple[str, str], ...]:
        """The (name, dialect type) of each input buffer."""
        return tuple((f"p{j}", "T" if t.dtype == inputs[0].dtype else dialect_type(t.dtype))
                     for j, t in enumerate(inputs))

    def variant(self, attrs: dict[str, Any]) -> str:
        """What distinguishes kernels of the same dtype (attributes compiled into the body)."""
        return ""

    def plan(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType], attrs: dict[str, Any],
             info: DeviceInfo) -> Plan:
        from .fused import wide_plan  # (fused composes this module's ops)

        wide = wide_plan(self, inputs, outputs, attrs, info)
        if wide is not None:
            return wide
        elem = dialect_type(inputs[0].dtype)
        out = "uchar" if self.predicate else "T"
        tag = "_".join(p for p in (elem, *(dialect_type(t.dtype) for t in inputs[1:] if t.dtype != inputs[0].dtype),
                                   self.variant(attrs)) if p)
        return _broadcast_plan(self, inputs, outputs[0], info, self.buffers(inputs), out, elem,
                               self.compute(inputs, attrs), tag)


def broadcast_into(ufunc: np.ufunc, inputs: Sequence[np.ndarray], out: np.ndarray) -> None:
    """``ufunc(*inputs, out=out)`` with NumPy broadcasting, split along the output's first axis longer than 1
    (``parallel``): each piece reads the inputs' matching slices, or the whole of a broadcast input."""
    rank = out.ndim
    ins = [x.reshape((1,) * (rank - x.ndim) + x.shape) for x in inputs]
    axis = next((d for d, n in enumerate(out.shape) if n > 1), 0)
    lead = (slice(None),) * axis

    def piece(a: int, b: int) -> None:
        part = lead + (slice(a, b),)
        with np.errstate(all="ignore"):
            ufunc(*[x[part] if x.shape[axis] > 1 else x for x in ins], out=out[part])
    parallel(piece, out.shape[axis], out.nbytes * (1 + len(inputs)))


def binary(name: str, expr: str, numpy: Callable, int_expr: str = "", doc: str = "", bool_expr: str = "",
           predicate: bool = False) -> None:
    """Define and register a Binary op."""
    cls = type(name.title().replace("_", "") + "Op", (Binary,),
               {"name": name, "expr": expr, "int_expr": int_expr, "bool_expr": bool_expr, "predicate": predicate,
                "numpy": staticmethod(numpy), "__doc__": doc})
    register(cls)


binary("add", "(va + vb)", np.add, "(va + vb)", "a + b, broadcasting.")
binary("sub", "(va - vb)", np.subtract, "(va - vb)", "a - b, broadcasting.")
binary("mul", "(va * vb)", np.multiply, "(va * vb)", "a * b, broadcasting.")
binary("max", "dl_max(va, vb)", np.maximum, "(va > vb ? va : vb)", "Elementwise maximum; NaN propagates.")
binary("min", "dl_min(va, vb)", np.minimum, "(va < vb ? va : vb)", "Elementwise minimum; NaN propagates.")


# -- integer division, remainder and power ---------------------------------------------------------------------
def int_magnitudes(elem: str) -> str:
    """Dialect code loading integer operands ``p0[o0]``, ``p1[o1]`` of type ``elem`` as ``a``, ``b`` (widened) and
    their magnitudes ``ua``, ``ub`` (unsigned, exact even for the most negative value): GLSL leaves ``/`` and ``%``
    of negative operands undefined, so signed division goes through magnitudes."""
    w, u = wide(elem), wide_unsigned(elem)
    code = f"        {w} a = CAST({w}, p0[o0]);\n        {w} b = CAST({w}, p1[o1]);\n"
    if elem in SIGNED_TYPES:
        code += (f"        {u} ua = a < CAST({w}, 0) ? CAST({u}, 0) - CAST({u}, a) : CAST({u}, a);\n"
                 f"        {u} ub = b < CAST({w}, 0) ? CAST({u}, 0) - CAST({u}, b) : CAST({u}, b);\n")
    else:
        code += f"        {u} ua = CAST({u}, a);\n        {u} ub = CAST({u}, b);\n"
    return code


def negate_if(cond: str, value: str, elem: str) -> str:
    """``cond ? -value : value`` for an unsigned magnitude ``value`` (wraps; no signed overflow)."""
    u = wide_unsigned(elem)
    return f"({cond} ? CAST({u}, 0) - {value} : {value})"


def trunc_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division rounding toward zero (C's ``/``); 0 where b is 0, as NumPy's floor division gives."""
    q, r = np.divmod(a, b)
    fix = (r != 0) & ((a < 0) != (b < 0))
    return q + fix.astype(q.dtype)


@register
class Div(Binary):
    """a / b, broadcasting; integers divide exactly, truncating toward zero (x / 0 gives 0 there)."""

    name = "div"
    kinds = "fi"
    expr = "dl_div(va, vb)"

    def compute_numpy(self, a, b, attrs):
        return trunc_divide(a, b) if kind_of(a.dtype) == "i" else np.true_divide(a, b)

    def compute(self, inputs, attrs):
        elem = dialect_type(inputs[0].dtype)
        if kind_of(inputs[0].dtype) != "i":
            return super().compute(inputs, attrs)
        u = wide_unsigned(elem)
        code = int_magnitudes(elem) + f"        {u} q = ub == CAST({u}, 0) ? CAST({u}, 0) : ua / ub;\n"
        if elem in SIGNED_TYPES:
            w = wide(elem)
            signs_differ = f"(a < CAST({w}, 0)) != (b < CAST({w}, 0))"
            code += f"        y[i] = CAST(T, {negate_if(signs_differ, 'q', elem)});\n"
        else:
            code += "        y[i] = CAST(T, q);\n"
        return code


@register
class Mod(Binary):
    """a mod b, broadcasting.  ``fmod=0``: the remainder takes the divisor's sign (Python's ``%``, NumPy's
    ``remainder``); ``fmod=1``: the dividend's (C's ``fmod``).  An integer x mod 0 gives 0."""

    name = "mod"
    kinds = "fi"  # the forms are in ``compute``

    def attributes(self, attrs):
        extra = set(attrs) - {"fmod"}
        if extra:
            raise self.error(f"unknown attribute(s) {sorted(extra)}; it takes ['fmod']")
        fmod = attrs.get("fmod", 0)
        if isinstance(fmod, bool) or not isinstance(fmod, (int, np.integer)) or int(fmod) not in (0, 1):
            raise self.error(f"attribute 'fmod' must be 0 or 1, got {fmod!r}")
        return {"fmod": int(fmod)}

    def variant(self, attrs):
        return f"fmod{attrs['fmod']}"

    def compute_numpy(self, a, b, attrs):
        return np.fmod(a, b) if attrs["fmod"] else np.remainder(a, b)

    def compute(self, inputs, attrs):
        elem = dialect_type(inputs[0].dtype)
        if kind_of(inputs[0].dtype) == "f":
            code = ("        ACC va = TO_ACC(p0[o0]);\n        ACC vb = TO_ACC(p1[o1]);\n"
                    "        ACC r = dl_fmod(va, vb);\n")
            if not attrs["fmod"]:  # toward the divisor's sign; a zero takes the divisor's sign
                code += ("        ACC z = CAST(ACC, 0.0f);\n"
                         "        r = (r != z && ((r < z) != (vb < z))) ? r + vb : (r == z ? (vb < z ? -z : z) : r);\n")
            return code + "        y[i] = FROM_ACC(r);\n"
        u, w = wide_unsigned(elem), wide(elem)
        code = int_magnitudes(elem) + f"        {u} m = ub == CAST({u}, 0) ? CAST({u}, 0) : ua % ub;\n"
        if elem not in SIGNED_TYPES:
            return code + "        y[i] = CAST(T, m);\n"
        if attrs["fmod"]:
            return code + f"        y[i] = CAST(T, {negate_if(f'a < CAST({w}, 0)', 'm', elem)});\n"
        code += (f"        {u} r = (m != CAST({u}, 0) && ((a < CAST({w}, 0)) != (b < CAST({w}, 0)))) ? ub - m : m;\n"
                 f"        y[i] = CAST(T, {negate_if(f'b < CAST({w}, 0)', 'r', elem)});\n")
        return code


def int_power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a ** b for integers, wrapping as the dtype does; a negative exponent gives 1 / a ** -b truncated (1 for
    a = 1, +-1 for a = -1, else 0)."""
    neg = b < 0
    r = np.power(a, np.where(neg, 0, b).astype(b.dtype))
    if np.any(neg):
        one = np.ones_like(r)
        odd = (b % 2) != 0
        inv = np.where(a == 1, one, np.where(a == -1, np.where(odd, -one, one), 0))
        r = np.where(neg, inv, r)
    return r


@register
class Pow(Binary):
    """a ** b, broadcasting.  Float bases take an exponent of their dtype (negative bases need integral
    exponents); integer bases an integer exponent of their dtype (exact, wrapping) or a float exponent (computed
    in that float type, the result truncated toward zero as ONNX's Pow does)."""

    name = "pow"
    kinds = "fi"
    expr = "dl_pow(va, vb)"  # the integer forms are in ``compute``

    def check(self, inputs, attrs):
        no_attrs(self, attrs)
        base, expo = inputs[0].dtype, inputs[1].dtype
        self.check_kind(base)
        if not (expo == base or (kind_of(base) == "i" and kind_of(expo) == "f")):
            raise self.error(f"the exponent must have the base's dtype ({base})"
                             + (" or a floating-point one" if kind_of(base) == "i" else "") + f", got {expo}")
        broadcast_shape(self, [t.shape for t in inputs])
        return {}

    def compute_numpy(self, a, b, attrs):
        if kind_of(a.dtype) == "f":
            return np.power(a, b)
        if kind_of(b.dtype) == "i":
            return int_power(a, b)
        return np.trunc(np.power(a.astype(b.dtype), b))

    def compute(self, inputs, attrs):
        base, expo = inputs[0].dtype, inputs[1].dtype
        if kind_of(base) == "f":
            return super().compute(inputs, attrs)
        elem = dialect_type(base)
        if kind_of(expo) == "f":  # in the exponent's float type; a result within rounding of an integer is it
            f = "f64" if expo.name == "float64" else "float"
            eps = "1e-13" if f == "f64" else "4e-6f"
            return (f"        {f} r = dl_pow(CAST({f}, p0[o0]), CAST({f}, p1[o1]));\n"
                    f"        {f} n = dl_round(r);\n"
                    f"        r = dl_abs(r - n) <= CAST({f}, {eps}) * dl_abs(n) ? n : dl_trunc(r);\n"
                    f"        y[i] = {float_to_int('r', f, elem)};\n")
        u, w = wide_unsigned(elem), wide(elem)
        code = (f"        {u} x = CAST({u}, CAST({w}, p0[o0]));\n        {w} e = CAST({w}, p1[o1]);\n"
                f"        {u} r = CAST({u}, 1);\n")
        loop = ("while (e > CAST({w}, 0)) {{ if ((e & CAST({w}, 1)) != CAST({w}, 0)) r = r * x; "
                "x = x * x; e = e >> 1; }}").format(w=w)
        if elem in SIGNED_TYPES:
            code += (f"        if (e < CAST({w}, 0)) {{\n"
                     f"            {w} a = CAST({w}, p0[o0]);\n"
                     f"            r = a == CAST({w}, 1) ? CAST({u}, 1) : (a == CAST({w}, -1) ? "
                     f"((e & CAST({w}, 1)) != CAST({w}, 0) ? CAST({u}, 0) - CAST({u}, 1) : CAST({u}, 1)) : "
                     f"CAST({u}, 0));\n"
                     f"        }} else {loop}\n")
        else:
            code += f"        {loop}\n"
        return code + "        y[i] = CAST(T, r);\n"


def float_to_int(value: str, src: str, dst: str) -> str:
    """Dialect expression converting float ``value`` (dialect type ``src``, already integral or truncated by the
    conversion) to integer type ``dst`` as NumPy does on x86 where C defines it: narrow types through int (their
    bits wrap), unsigned ones through the signed type of their width for negative values."""
    if dst in ("char", "uchar", "i16", "u16"):
        return f"CAST({dst}, CAST(int, {value}))"
    if dst in ("uint", "u64"):
        signed = "int" if dst == "uint" else "i64"
        return f"({value} < CAST({src}, 0) ? CAST({dst}, CAST({signed}, {value})) : CAST({dst}, {value}))"
    return f"CAST({dst}, {value})"


@register
class Where(Op):
    """where(cond, x, y): x where cond is nonzero, else y; all three broadcast."""

    name = "where"
    pointwise = True
    min_inputs = 3
    max_inputs = 3
    kernel_dtypes = KERNEL_DTYPES
    cond_dtypes = frozenset({"bool", "uint8", "int8", "int32", "int64"})

    def check(self, inputs, attrs):
        no_attrs(self, attrs)
        cond, x, y = inputs
        if cond.dtype.kind not in "biu":
            raise self.error(f"cond must be bool or integer, got {cond.dtype}")
        check_dtype_same(self, [x, y], ("x", "y"))
        if not is_number(x.dtype):
            raise self.error(f"x and y must be numbers, got {x.dtype}")
        broadcast_shape(self, [t.shape for t in inputs])
        return {}

    def infer(self, inputs, attrs):
        return [TensorType(broadcast_shape(self, [t.shape for t in inputs]), inputs[1].dtype)]

    def reference(self, inputs, attrs):
        cond, x, y = inputs
        return [np.where(cond.astype(bool), x, y).astype(x.dtype)]

    def reference_into(self, inputs, outputs, attrs):
        cond, x, y = inputs
        if outputs[0].ndim == 0 or cond.dtype.kind != "b":
            return super().reference_into(inputs, outputs, attrs)
        np.copyto(outputs[0], np.broadcast_to(y, outputs[0].shape))
        np.copyto(outputs[0], np.broadcast_to(x, outputs[0].shape), where=np.broadcast_to(cond, outputs[0].shape))
        return None

    def bind_into(self, inputs, outputs, attrs):
        """The two masked copies with their broadcast views made once (the output shares no memory with an input:
        ``reference_into``'s contract)."""
        cond, x, y = inputs
        out = outputs[0]
        if out.ndim == 0 or cond.dtype.kind != "b" or splits(max(out.shape), out.nbytes * 2):
            return super().bind_into(inputs, outputs, attrs)
        xs, ys, cs = (np.broadcast_to(v, out.shape) for v in (x, y, cond))

        def where() -> None:
            np.copyto(out, ys)
            np.copyto(out, xs, where=cs)
        return where

    def unsupported(self, inputs, attrs, info):
        for j, t in enumerate(inputs):
            name = t.dtype.name
            if j == 0 and name == "bool" and info.kernel_language != "python":
                name = "uint8"  # kernels read a bool condition as its bytes
            if name not in info.dtypes:
                return f"{info.id} has no {t.dtype.name}"
        if info.kernel_language == "python":
            return None
        if not kernel_takes(self.kernel_dtypes, inputs[1].dtype.name, info):
            return f"where has no {info.kernel_language} kernel for {inputs[1].dtype}"
        if inputs[0].dtype.name not in self.cond_dtypes:
            return f"where has no {info.kernel_language} kernel for a {inputs[0].dtype} condition"
        return broadcast_unsupported(self, inputs, self.infer(inputs, attrs)[0])

    def compute(self, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> str:
        """The dialect statement setting ``y[i]`` from ``p0[o0]`` (the condition), ``p1[o1]`` and ``p2[o2]``."""
        return f"        y[i] = p0[o0] != CAST({dialect_type(inputs[0].dtype)}, 0) ? p1[o1] : p2[o2];\n"

    def plan(self, inputs, outputs, attrs, info):
        cond = dialect_type(inputs[0].dtype)
        elem = dialect_type(inputs[1].dtype)
        return _broadcast_plan(self, inputs, outputs[0], info, (("p0", cond), ("p1", "T"), ("p2", "T")), "T",
                               elem, self.compute(inputs, attrs), f"{cond}_{elem}")


@register
class Prelu(Op):
    """prelu(x, slope): x where x >= 0, else slope * x; slope broadcasts to x's shape (ONNX PRelu)."""

    name = "prelu"
    pointwise = True
    min_inputs = 2
    max_inputs = 2
    kernel_dtypes = frozenset({"float16", "float32", "float64"})

    def check(self, inputs, attrs):
        no_attrs(self, attrs)
        check_dtype_same(self, inputs, ("x", "slope"))
        if kind_of(inputs[0].dtype) != "f":
            raise self.error(f"needs floating-point inputs, got {inputs[0].dtype}")
        x, slope = inputs
        if broadcast_shape(self, [x.shape, slope.shape]) != x.shape:
            raise self.error(f"slope {slope.shape} must broadcast to x's shape {x.shape}")
        return {}

    def infer(self, inputs, attrs):
        return [inputs[0]]

    def reference(self, inputs, attrs):
        x, slope = inputs[0], computable(inputs[1])
        xc = computable(x)
        return [np.where(xc < 0, slope * xc, xc).astype(x.dtype)]

    def unsupported(self, inputs, attrs, info):
        why = super().unsupported(inputs, attrs, info)
        if why is None and info.kernel_language != "python":
            why = broadcast_unsupported(self, inputs, inputs[0])
        return why

    def compute(self, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> str:
        """Dialect statements setting ``y[i]`` from ``p0[o0]`` (x) and ``p1[o1]`` (the slope)."""
        return ("        ACC va = TO_ACC(p0[o0]);\n        ACC vs = TO_ACC(p1[o1]);\n"
                "        y[i] = FROM_ACC(va < CAST(ACC, 0.0f) ? vs * va : va);\n")

    def plan(self, inputs, outputs, attrs, info):
        elem = dialect_type(inputs[0].dtype)
        return _broadcast_plan(self, inputs, outputs[0], info, (("p0", "T"), ("p1", "T")), "T", elem,
                               self.compute(inputs, attrs), elem)

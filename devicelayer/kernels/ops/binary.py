"""Binary (and ternary) elementwise ops with NumPy broadcasting: add, sub, mul, div, pow, max, min, where, prelu.

Each op's math is one dialect expression (``va``, ``vb`` the operands) and one NumPy
function.  Broadcasting is done by index arithmetic: the output shape and every
input's broadcast strides (0 along broadcast dimensions) are collapsed to the
fewest dimensions that describe them, and passed as int scalars; the rank is
structural (one kernel per rank, 1 to 6).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ...info import DeviceInfo
from ..dialect import KernelSpec, Param, dialect_type
from ..op import Launch, Op, Plan, TensorType, groups_for, local_1d, parallel, register

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


class Binary(Op):
    """y = f(a, b) with NumPy broadcasting; both operands of one dtype."""

    min_inputs = 2
    max_inputs = 2
    pointwise = True
    #: dialect expression of ``va``, ``vb`` (floats: as ACC; integers: as T)
    expr: str = ""
    #: the same for integer element types (empty: floats only)
    int_expr: str = ""
    numpy: Callable[[np.ndarray, np.ndarray], np.ndarray]
    kernel_dtypes = frozenset({"float32", "float16"})

    def check(self, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> dict[str, Any]:
        no_attrs(self, attrs)
        check_dtype_same(self, inputs, ("a", "b"))
        kind = inputs[0].dtype.kind
        if kind != "f" and not (self.int_expr and kind in "iu"):
            allowed = "floating-point or integer" if self.int_expr else "floating-point"
            raise self.error(f"needs {allowed} operands, got {inputs[0].dtype}")
        broadcast_shape(self, [t.shape for t in inputs])
        return {}

    def infer(self, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        return [TensorType(broadcast_shape(self, [t.shape for t in inputs]), inputs[0].dtype)]

    def reference(self, inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        a, b = inputs
        with np.errstate(all="ignore"):
            y = self.numpy(a, b)
        return [np.asarray(y, dtype=a.dtype)]

    def reference_into(self, inputs, outputs, attrs):
        if not isinstance(self.numpy, np.ufunc) or outputs[0].ndim == 0:
            return super().reference_into(inputs, outputs, attrs)
        broadcast_into(self.numpy, inputs, outputs[0])
        return None

    def unsupported(self, inputs: Sequence[TensorType], attrs: dict[str, Any], info: DeviceInfo) -> str | None:
        why = super().unsupported(inputs, attrs, info)
        if why is None and info.kernel_language != "python":
            out = self.infer(inputs, attrs)[0]
            why = _too_big([*inputs, out])
            if why is None and _collapsed_rank(inputs, out) > MAX_RANK:
                why = f"{self.name}: broadcast needs more than {MAX_RANK} dimensions"
        return why

    def plan(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType], attrs: dict[str, Any],
             info: DeviceInfo) -> Plan:
        elem = dialect_type(inputs[0].dtype)
        if inputs[0].dtype.kind == "f":
            compute = ("        ACC va = TO_ACC(p0[o0]);\n        ACC vb = TO_ACC(p1[o1]);\n"
                       f"        y[i] = FROM_ACC({self.expr});\n")
        else:
            compute = f"        T va = p0[o0];\n        T vb = p1[o1];\n        y[i] = {self.int_expr};\n"
        return _broadcast_plan(self, inputs, outputs[0], info, (("p0", "T"), ("p1", "T")), "T", elem, compute,
                               elem)


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


def binary(name: str, expr: str, numpy: Callable, int_expr: str = "", doc: str = "") -> None:
    """Define and register a Binary op."""
    kernel_dtypes = frozenset({"float32", "float16"} | ({"int32", "int64"} if int_expr else set()))
    cls = type(name.title() + "Op", (Binary,), {"name": name, "expr": expr, "int_expr": int_expr,
                                                 "numpy": staticmethod(numpy), "kernel_dtypes": kernel_dtypes,
                                                 "__doc__": doc})
    register(cls)


binary("add", "(va + vb)", np.add, "(va + vb)", "a + b, broadcasting.")
binary("sub", "(va - vb)", np.subtract, "(va - vb)", "a - b, broadcasting.")
binary("mul", "(va * vb)", np.multiply, "(va * vb)", "a * b, broadcasting.")
binary("div", "(va / vb)", np.true_divide, doc="a / b (floating point), broadcasting.")
binary("pow", "dl_pow(va, vb)", np.power, doc="a ** b (floating point; negative bases take integral exponents).")
binary("max", "dl_max(va, vb)", np.maximum, "(va > vb ? va : vb)", "Elementwise maximum; NaN propagates.")
binary("min", "dl_min(va, vb)", np.minimum, "(va < vb ? va : vb)", "Elementwise minimum; NaN propagates.")


@register
class Where(Op):
    """where(cond, x, y): x where cond is nonzero, else y; all three broadcast."""

    name = "where"
    pointwise = True
    min_inputs = 3
    max_inputs = 3
    kernel_dtypes = frozenset({"float32", "float16", "int32", "int64"})
    cond_dtypes = frozenset({"bool", "uint8", "int8", "int32", "int64"})

    def check(self, inputs, attrs):
        no_attrs(self, attrs)
        cond, x, y = inputs
        if cond.dtype.kind not in "biu":
            raise self.error(f"cond must be bool or integer, got {cond.dtype}")
        check_dtype_same(self, [x, y], ("x", "y"))
        if x.dtype.kind not in "fiub":
            raise self.error(f"x and y must be numbers, got {x.dtype}")
        broadcast_shape(self, [t.shape for t in inputs])
        return {}

    def infer(self, inputs, attrs):
        return [TensorType(broadcast_shape(self, [t.shape for t in inputs]), inputs[1].dtype)]

    def reference(self, inputs, attrs):
        cond, x, y = inputs
        return [np.where(cond.astype(bool), x, y).astype(x.dtype)]

    def unsupported(self, inputs, attrs, info):
        for j, t in enumerate(inputs):
            name = t.dtype.name
            if j == 0 and name == "bool" and info.kernel_language != "python":
                name = "uint8"  # kernels read a bool condition as its bytes
            if name not in info.dtypes:
                return f"{info.id} has no {t.dtype.name}"
        if info.kernel_language == "python":
            return None
        if inputs[1].dtype.name not in self.kernel_dtypes:
            return f"where has no {info.kernel_language} kernel for {inputs[1].dtype}"
        if inputs[0].dtype.name not in self.cond_dtypes:
            return f"where has no {info.kernel_language} kernel for a {inputs[0].dtype} condition"
        out = self.infer(inputs, attrs)[0]
        why = _too_big([*inputs, out])
        if why is None and _collapsed_rank(inputs, out) > MAX_RANK:
            why = f"where: broadcast needs more than {MAX_RANK} dimensions"
        return why

    def plan(self, inputs, outputs, attrs, info):
        cond = "uchar" if inputs[0].dtype.kind == "b" else dialect_type(inputs[0].dtype)
        elem = dialect_type(inputs[1].dtype)
        compute = f"        y[i] = p0[o0] != CAST({cond}, 0) ? p1[o1] : p2[o2];\n"
        return _broadcast_plan(self, inputs, outputs[0], info, (("p0", cond), ("p1", "T"), ("p2", "T")), "T",
                               elem, compute, f"{cond}_{elem}")


@register
class Prelu(Op):
    """prelu(x, slope): x where x >= 0, else slope * x; slope broadcasts to x's shape (ONNX PRelu)."""

    name = "prelu"
    pointwise = True
    min_inputs = 2
    max_inputs = 2

    def check(self, inputs, attrs):
        no_attrs(self, attrs)
        check_dtype_same(self, inputs, ("x", "slope"))
        if inputs[0].dtype.kind != "f":
            raise self.error(f"needs floating-point inputs, got {inputs[0].dtype}")
        x, slope = inputs
        if broadcast_shape(self, [x.shape, slope.shape]) != x.shape:
            raise self.error(f"slope {slope.shape} must broadcast to x's shape {x.shape}")
        return {}

    def infer(self, inputs, attrs):
        return [inputs[0]]

    def reference(self, inputs, attrs):
        x, slope = inputs
        return [np.where(x < 0, slope * x, x).astype(x.dtype)]

    def unsupported(self, inputs, attrs, info):
        why = super().unsupported(inputs, attrs, info)
        if why is None and info.kernel_language != "python":
            why = _too_big(inputs)
            if why is None and _collapsed_rank(inputs, inputs[0]) > MAX_RANK:
                why = f"prelu: broadcast needs more than {MAX_RANK} dimensions"
        return why

    def plan(self, inputs, outputs, attrs, info):
        elem = dialect_type(inputs[0].dtype)
        compute = ("        ACC va = TO_ACC(p0[o0]);\n        ACC vs = TO_ACC(p1[o1]);\n"
                   "        y[i] = FROM_ACC(va < CAST(ACC, 0.0f) ? vs * va : va);\n")
        return _broadcast_plan(self, inputs, outputs[0], info, (("p0", "T"), ("p1", "T")), "T", elem, compute, elem)

"""Unary elementwise ops: one expression each, in NumPy and in the kernel dialect."""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Sequence

import numpy as np

from ...dtypes import EXTRA_FLOATS
from ...info import DeviceInfo
from ..dialect import KernelSpec, Param, dialect_type
from ..op import (Launch, Op, Plan, TensorType, float_attr as _float_attr, groups_for, local_1d, parallel,
                  register, splits)
from ..render import lacks
from ..special import erf as _np_erf
from .numeric import KERNEL_DTYPES, computable, describe_kinds, kind_of, scalar_type


class Unary(Op):
    """An op y = f(x, a, b) applied to every element; ``a``/``b`` are its float attributes.

    The math is a dialect expression per kind of input: ``expr`` for floats (``v`` as ACC), ``int_expr`` for
    integers and ``bool_expr`` for bools (``v`` as T); an empty one means the op does not take that kind.  A
    ``predicate`` gives a bool output.
    """

    pointwise = True
    kernel_dtypes = KERNEL_DTYPES

    expr: str = ""
    int_expr: str = ""
    bool_expr: str = ""
    predicate: bool = False
    #: attribute names mapped to the scalars a and b, with defaults
    params: tuple[tuple[str, float], ...] = ()
    #: constants passed in the scalars after the attributes (a float literal would lose float64's precision)
    constants: tuple[float, ...] = ()
    numpy: Callable[..., np.ndarray]
    #: ``numpy`` writing into ``out=`` (None: computed apart and copied)
    numpy_into: Callable[..., Any] | None = None

    @property
    def kinds(self) -> str:
        """The kinds of input the op takes ("f", "i", "b")."""
        return "".join(k for k, e in (("f", self.expr), ("i", self.int_expr), ("b", self.bool_expr)) if e)

    def check(self, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> dict[str, Any]:
        known = {name for name, _ in self.params}
        extra = set(attrs) - known
        if extra:
            raise self.error(f"unknown attribute(s) {sorted(extra)}; it takes {sorted(known) or 'none'}")
        if kind_of(inputs[0].dtype) not in self.kinds:
            raise self.error(f"needs a {describe_kinds(self.kinds)} input, got {inputs[0].dtype}")
        return {name: _float_attr(self, attrs, name, default) for name, default in self.params}

    def infer(self, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        return [TensorType(inputs[0].shape, np.dtype(bool)) if self.predicate else inputs[0]]

    def _scalars(self, dtype: np.dtype, attrs: dict[str, Any]) -> list[Any]:
        cast = dtype.type if dtype.kind == "f" else float
        return [cast(attrs[n]) for n, _ in self.params]

    def reference(self, inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x = computable(inputs[0])
        with np.errstate(all="ignore"):
            y = self.numpy(x, *self._scalars(x.dtype, attrs))
            return [np.asarray(y).astype(self.infer([TensorType(x.shape, inputs[0].dtype)], attrs)[0].dtype,
                                         copy=False)]

    def reference_into(self, inputs, outputs, attrs):
        if self.numpy_into is None or inputs[0].dtype.name in EXTRA_FLOATS:
            return super().reference_into(inputs, outputs, attrs)
        x, y = inputs[0].reshape(-1), outputs[0].reshape(-1)
        params = self._scalars(x.dtype, attrs)
        into = self.numpy_into

        def piece(a: int, b: int) -> None:
            with np.errstate(all="ignore"):
                into(x[a:b], *params, out=y[a:b])
        parallel(piece, x.size, x.nbytes + y.nbytes)
        return None

    def bind_into(self, inputs, outputs, attrs):
        if self.numpy_into is None or inputs[0].dtype.name in EXTRA_FLOATS:
            return super().bind_into(inputs, outputs, attrs)
        x, y = inputs[0].reshape(-1), outputs[0].reshape(-1)
        if splits(x.size, x.nbytes + y.nbytes):
            return super().bind_into(inputs, outputs, attrs)
        return functools.partial(self.numpy_into, x, *self._scalars(x.dtype, attrs), out=y)

    def statement(self, dtype: np.dtype) -> str:
        """The dialect statement computing ``y[i]`` from ``x[i]``."""
        kind = kind_of(dtype)
        if kind == "f":
            load, value = "ACC v = TO_ACC(x[i]);", self.expr
        else:
            load, value = "T v = x[i];", self.int_expr if kind == "i" else self.bool_expr
        if self.predicate:
            return f"{load}\n        y[i] = ({value}) ? CAST(uchar, 1) : CAST(uchar, 0);"
        if kind == "f":
            return f"{load}\n        y[i] = FROM_ACC({value});"
        return f"{load}\n        y[i] = CAST(T, {value});"

    def unsupported(self, inputs: Sequence[TensorType], attrs: dict[str, Any], info: DeviceInfo) -> str | None:
        why = super().unsupported(inputs, attrs, info)
        if why is None and info.kernel_language != "python":
            why = lacks(self.statement(inputs[0].dtype), info.kernel_language, dialect_type(inputs[0].dtype))
        return why

    def plan(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType], attrs: dict[str, Any],
             info: DeviceInfo) -> Plan:
        from .fused import wide_plan  # (fused composes this module's ops)

        wide = wide_plan(self, inputs, outputs, attrs, info)
        if wide is not None:
            return wide
        elem = dialect_type(inputs[0].dtype)
        scalar = scalar_type(elem)
        spec = KernelSpec(
            f"{self.name}_{elem}",
            (Param("x", "T", "in"), Param("y", "uchar" if self.predicate else "T", "out"),
             Param("n", "int", "scalar"), Param("a", scalar, "scalar"), Param("b", scalar, "scalar")),
            f"    FOR_EACH(i, n) {{\n        {self.statement(inputs[0].dtype)}\n    }}",
            elem=elem)
        values = [attrs[name] for name, _ in self.params] + list(self.constants) + [0.0, 0.0]
        n = inputs[0].size
        local = local_1d(info)
        return Plan([Launch(spec, (("in", 0), ("out", 0), n, float(values[0]), float(values[1])),
                            groups_for(n, local, info), (local,))])


def unary(name: str, expr: str, numpy: Callable[..., np.ndarray], params: tuple[tuple[str, float], ...] = (),
          into: Callable[..., Any] | None = None, int_expr: str = "", bool_expr: str = "",
          predicate: bool = False, constants: tuple[float, ...] = ()) -> None:
    """Define and register a Unary op (``into``: the NumPy form taking ``out=``; a ufunc is its own)."""
    if into is None and isinstance(numpy, np.ufunc):
        into = numpy
    cls = type(name.title().replace("_", ""), (Unary,),
               {"name": name, "expr": expr, "params": params, "int_expr": int_expr, "bool_expr": bool_expr,
                "predicate": predicate, "constants": constants, "numpy": staticmethod(numpy),
                "numpy_into": None if into is None else staticmethod(into)})
    register(cls)


#: zeros that ``relu_into`` compares rows of this length against
_ROW = 4096
_zero_rows: dict[np.dtype, np.ndarray] = {}


def relu_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = max(x, 0)`` (NaN stays NaN).  NumPy's maximum is vectorised for two arrays but not against a
    scalar (2-3x slower for float32): the bulk is compared row by row with a row of zeros."""
    zero = x.dtype.type(0)
    if not (x.flags.c_contiguous and out.flags.c_contiguous):
        np.maximum(x, zero, out=out)
        return
    xf, of = x.reshape(-1), out.reshape(-1)
    bulk = xf.size - xf.size % _ROW
    if bulk:
        row = _zero_rows.get(x.dtype)
        if row is None:
            row = _zero_rows.setdefault(x.dtype, np.zeros(_ROW, x.dtype))
        np.maximum(xf[:bulk].reshape(-1, _ROW), row, out=of[:bulk].reshape(-1, _ROW))
    if bulk < xf.size:
        np.maximum(xf[bulk:], zero, out=of[bulk:])


def _sigmoid_into(x: np.ndarray, out: np.ndarray) -> None:
    np.negative(x, out=out)
    np.exp(out, out=out)
    out += out.dtype.type(1)
    np.reciprocal(out, out=out)


def _hard_swish(x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    _hard_swish_into(x, out=out)
    return out


def _hard_swish_into(x: np.ndarray, out: np.ndarray) -> None:
    """x * clip(x / 6 + 1/2, 0, 1), in ``out``."""
    np.multiply(x, x.dtype.type(1.0 / 6.0), out=out)
    out += x.dtype.type(0.5)
    np.clip(out, 0, 1, out=out)
    out *= x


def _hard_sigmoid_into(x: np.ndarray, a: Any, b: Any, out: np.ndarray) -> None:
    """clip(a x + b, 0, 1), in ``out`` (NaN stays NaN)."""
    np.multiply(x, a, out=out)
    out += b
    np.clip(out, 0, 1, out=out)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    c = np.sqrt(2.0 / np.pi).astype(x.dtype)
    return 0.5 * x * (1 + np.tanh(c * (x + x.dtype.type(0.044715) * x ** 3)))


_ZERO = "CAST(ACC, 0.0f)"
_ONE = "CAST(ACC, 1.0f)"


def _log1p_small(t: str, terms: int = 10) -> str:
    """log(1 + t) for 0 <= t <= e^-4 as its series (a float64-exact sum of ``terms`` terms): ``log`` near 1
    loses the digits of a small result on drivers with an approximate ``log``."""
    expr = f"({_ONE} / CAST(ACC, {terms}.0f))"
    for k in range(terms - 1, 0, -1):
        expr = f"({_ONE} / CAST(ACC, {k}.0f) - {t} * {expr})"
    return f"({t} * {expr})"


_SOFTPLUS = (f"(v > CAST(ACC, 20.0f) ? v + dl_exp(-v) : (v < CAST(ACC, -4.0f) ? {_log1p_small('dl_exp(v)')} : "
             f"dl_log({_ONE} + dl_exp(v))))")
_INT_ZERO = "CAST(T, 0)"

unary("relu", f"dl_max(v, {_ZERO})", lambda x: np.maximum(x, 0), into=relu_into,
      int_expr=f"(v > {_INT_ZERO} ? v : {_INT_ZERO})")
unary("leaky_relu", f"(v >= {_ZERO} ? v : v * CAST(ACC, a))", lambda x, a: np.where(x >= 0, x, x * a),
      (("alpha", 0.01),))
unary("elu", f"(v >= {_ZERO} ? v : CAST(ACC, a) * (dl_exp(v) - {_ONE}))",
      lambda x, a: np.where(x >= 0, x, a * (np.exp(x) - 1)), (("alpha", 1.0),))
unary("selu", f"CAST(ACC, b) * (v > {_ZERO} ? v : CAST(ACC, a) * (dl_exp(v) - {_ONE}))",
      lambda x, a, g: g * np.where(x > 0, x, a * (np.exp(x) - 1)),
      (("alpha", 1.6732632423543772), ("gamma", 1.0507009873554805)))
unary("celu", f"(dl_max({_ZERO}, v) + dl_min({_ZERO}, CAST(ACC, a) * (dl_exp(v / CAST(ACC, a)) - {_ONE})))",
      lambda x, a: np.maximum(0, x) + np.minimum(0, a * (np.exp(x / a) - 1)), (("alpha", 1.0),))
unary("sigmoid", f"({_ONE} / ({_ONE} + dl_exp(-v)))", lambda x: 1 / (1 + np.exp(-x)), into=_sigmoid_into)
unary("hard_sigmoid", f"dl_max({_ZERO}, dl_min({_ONE}, CAST(ACC, a) * v + CAST(ACC, b)))",
      lambda x, a, b: np.clip(a * x + b, 0, 1), (("alpha", 0.2), ("beta", 0.5)), into=_hard_sigmoid_into)
unary("hard_swish", f"(v * dl_max({_ZERO}, dl_min({_ONE}, v / CAST(ACC, 6.0f) + CAST(ACC, 0.5f))))",
      _hard_swish, into=_hard_swish_into)
unary("swish", f"(v / ({_ONE} + dl_exp(-CAST(ACC, a) * v)))", lambda x, a: x / (1 + np.exp(-a * x)),
      (("alpha", 1.0),))
# tanh(softplus(x)) = n / (n + 2) with n = e^x (e^x + 2): no cancellation for negative x (where log(1 + e^x) and
# tanh lose the digits on drivers with approximate exp/log); the identity itself above x = 20
unary("mish", "(v > CAST(ACC, 20.0f) ? v : v * (dl_exp(v) * (dl_exp(v) + CAST(ACC, 2.0f))) / "
      "(dl_exp(v) * (dl_exp(v) + CAST(ACC, 2.0f)) + CAST(ACC, 2.0f)))", lambda x: x * np.tanh(np.logaddexp(0, x)))
unary("thresholded_relu", f"(v > CAST(ACC, a) ? v : {_ZERO})", lambda x, a: np.where(x > a, x, 0),
      (("alpha", 1.0),))
unary("shrink", f"(v < -CAST(ACC, b) ? v + CAST(ACC, a) : (v > CAST(ACC, b) ? v - CAST(ACC, a) : {_ZERO}))",
      lambda x, bias, lambd: np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0)),
      (("bias", 0.0), ("lambd", 0.5)))
unary("tanh", "dl_tanh(v)", np.tanh)
unary("gelu", f"(CAST(ACC, 0.5f) * v * ({_ONE} + dl_erf(v * CAST(ACC, a))))",
      lambda x: 0.5 * x * (1 + _np_erf(x / np.sqrt(2).astype(x.dtype))), constants=(math.sqrt(0.5),))
unary("gelu_tanh", f"(CAST(ACC, 0.5f) * v * ({_ONE} + dl_tanh(CAST(ACC, a) * (v + CAST(ACC, b) * v * v * v))))",
      _gelu_tanh, constants=(math.sqrt(2 / math.pi), 0.044715))
unary("softplus", _SOFTPLUS, lambda x: np.logaddexp(0, x))
unary("softsign", f"(v / ({_ONE} + dl_abs(v)))", lambda x: x / (1 + np.abs(x)))
unary("exp", "dl_exp(v)", np.exp)
unary("log", "dl_log(v)", np.log)
unary("sqrt", "dl_sqrt(v)", np.sqrt)
unary("reciprocal", f"({_ONE} / v)", lambda x: 1 / x)
unary("neg", "(-v)", np.negative, int_expr="(-v)")
unary("abs", "dl_abs(v)", np.abs, int_expr=f"(v < {_INT_ZERO} ? -v : v)")
unary("sign", "dl_sign(v)", np.sign, int_expr=f"(v > {_INT_ZERO} ? 1 : (v < {_INT_ZERO} ? -1 : 0))")
unary("erf", "dl_erf(v)", _np_erf)
unary("floor", "dl_floor(v)", np.floor)
unary("ceil", "dl_ceil(v)", np.ceil)
unary("round", "dl_round(v)", np.round)
for _f in ("sin", "cos", "tan", "sinh", "cosh", "asinh", "acosh", "atanh"):
    unary(_f, f"dl_{_f}(v)", getattr(np, _f))
for _f, _np_name in (("asin", "arcsin"), ("acos", "arccos"), ("atan", "arctan")):
    unary(_f, f"dl_{_f}(v)", getattr(np, _np_name))


@register
class Clip(Unary):
    """clip(x, min, max) of a float tensor; a missing bound is unbounded (integer tensors clip through max and
    min with bound tensors of their dtype)."""

    name = "clip"
    expr = "dl_min(dl_max(v, CAST(ACC, a)), CAST(ACC, b))"
    params = (("min", -math.inf), ("max", math.inf))

    def check(self, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> dict[str, Any]:
        extra = set(attrs) - {"min", "max"}
        if extra:
            raise self.error(f"unknown attribute(s) {sorted(extra)}; it takes ['max', 'min']")
        if kind_of(inputs[0].dtype) != "f":
            raise self.error(f"needs a floating-point input, got {inputs[0].dtype}")
        out = {}
        for name, default in self.params:
            value = attrs.get(name, default)
            if value is None:
                value = default
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                    or math.isnan(float(value)):
                raise self.error(f"attribute {name!r} must be a number, got {value!r}")
            out[name] = float(value)
        if out["min"] > out["max"]:
            raise self.error(f"min ({out['min']}) is greater than max ({out['max']})")
        return out

    @staticmethod
    def numpy(x, lo, hi):  # type: ignore[override]
        return np.clip(x, lo, hi)

    @staticmethod
    def numpy_into(x, lo, hi, out):  # type: ignore[override]
        np.clip(x, lo, hi, out=out)

    def plan(self, inputs, outputs, attrs, info):  # float32 push constants cannot hold inf: clamp to max float
        big = float(np.finfo(np.float64 if inputs[0].dtype == np.float64 else np.float32).max)
        attrs = {"min": max(attrs["min"], -big), "max": min(attrs["max"], big)}
        return super().plan(inputs, outputs, attrs, info)

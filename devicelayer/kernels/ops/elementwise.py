"""Unary elementwise ops: one expression each, in NumPy and in the kernel dialect."""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from ...info import DeviceInfo
from ..dialect import KernelSpec, Param, dialect_type
from ..op import (Launch, Op, Plan, TensorType, float_attr as _float_attr, groups_for, local_1d, parallel,
                  register)

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _np_erf(x: np.ndarray) -> np.ndarray:
    return _erf(x.astype(np.float64)).astype(x.dtype)


class Unary(Op):
    """An op y = f(x, a, b) applied to every element; ``a``/``b`` are its float attributes."""

    pointwise = True

    #: dialect expression of ``v`` (the element as ACC) and scalars ``a``, ``b``
    expr: str = ""
    #: attribute names mapped to the scalars a and b, with defaults
    params: tuple[tuple[str, float], ...] = ()
    numpy: Callable[..., np.ndarray]
    #: ``numpy`` writing into ``out=`` (None: computed apart and copied)
    numpy_into: Callable[..., Any] | None = None

    def check(self, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> dict[str, Any]:
        known = {name for name, _ in self.params}
        extra = set(attrs) - known
        if extra:
            raise self.error(f"unknown attribute(s) {sorted(extra)}; it takes {sorted(known) or 'none'}")
        if inputs[0].dtype.kind != "f":
            raise self.error(f"needs a floating-point input, got {inputs[0].dtype}")
        return {name: _float_attr(self, attrs, name, default) for name, default in self.params}

    def infer(self, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        return [inputs[0]]

    def reference(self, inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        with np.errstate(all="ignore"):
            y = self.numpy(x, *[x.dtype.type(attrs[n]) for n, _ in self.params])
        return [np.asarray(y, dtype=x.dtype)]

    def reference_into(self, inputs, outputs, attrs):
        if self.numpy_into is None:
            return super().reference_into(inputs, outputs, attrs)
        x, y = inputs[0].reshape(-1), outputs[0].reshape(-1)
        params = [x.dtype.type(attrs[n]) for n, _ in self.params]
        into = self.numpy_into

        def piece(a: int, b: int) -> None:
            with np.errstate(all="ignore"):
                into(x[a:b], *params, out=y[a:b])
        parallel(piece, x.size, 2 * x.nbytes)
        return None

    def plan(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType], attrs: dict[str, Any],
             info: DeviceInfo) -> Plan:
        elem = dialect_type(inputs[0].dtype)
        spec = KernelSpec(
            f"{self.name}_{elem}",
            (Param("x", "T", "in"), Param("y", "T", "out"), Param("n", "int", "scalar"),
             Param("a", "float", "scalar"), Param("b", "float", "scalar")),
            "    FOR_EACH(i, n) {\n        ACC v = TO_ACC(x[i]);\n"
            f"        y[i] = FROM_ACC({self.expr});\n    }}",
            elem=elem)
        values = [attrs[name] for name, _ in self.params] + [0.0, 0.0]
        n = inputs[0].size
        local = local_1d(info)
        return Plan([Launch(spec, (("in", 0), ("out", 0), n, float(values[0]), float(values[1])),
                            groups_for(n, local, info), (local,))])


def unary(name: str, expr: str, numpy: Callable[..., np.ndarray], params: tuple[tuple[str, float], ...] = (),
          into: Callable[..., Any] | None = None) -> None:
    """Define and register a Unary op (``into``: the NumPy form taking ``out=``; a ufunc is its own)."""
    if into is None and isinstance(numpy, np.ufunc):
        into = numpy
    cls = type(name.title().replace("_", ""), (Unary,), {"name": name, "expr": expr, "params": params,
                                                        "numpy": staticmethod(numpy),
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


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    c = np.sqrt(2.0 / np.pi).astype(x.dtype)
    return 0.5 * x * (1 + np.tanh(c * (x + x.dtype.type(0.044715) * x ** 3)))


unary("relu", "dl_max(v, CAST(ACC, 0.0f))", lambda x: np.maximum(x, 0), into=relu_into)
unary("leaky_relu", "(v >= CAST(ACC, 0.0f) ? v : v * CAST(ACC, a))", lambda x, a: np.where(x >= 0, x, x * a),
      (("alpha", 0.01),))
unary("elu", "(v >= CAST(ACC, 0.0f) ? v : CAST(ACC, a) * (dl_exp(v) - CAST(ACC, 1.0f)))",
      lambda x, a: np.where(x >= 0, x, a * (np.exp(x) - 1)), (("alpha", 1.0),))
unary("selu", "CAST(ACC, b) * (v > CAST(ACC, 0.0f) ? v : CAST(ACC, a) * (dl_exp(v) - CAST(ACC, 1.0f)))",
      lambda x, a, g: g * np.where(x > 0, x, a * (np.exp(x) - 1)),
      (("alpha", 1.6732632423543772), ("gamma", 1.0507009873554805)))
unary("sigmoid", "(CAST(ACC, 1.0f) / (CAST(ACC, 1.0f) + dl_exp(-v)))", lambda x: 1 / (1 + np.exp(-x)),
      into=_sigmoid_into)
unary("hard_sigmoid", "dl_max(CAST(ACC, 0.0f), dl_min(CAST(ACC, 1.0f), CAST(ACC, a) * v + CAST(ACC, b)))",
      lambda x, a, b: np.clip(a * x + b, 0, 1), (("alpha", 0.2), ("beta", 0.5)))
unary("tanh", "dl_tanh(v)", np.tanh)
unary("gelu", "(CAST(ACC, 0.5f) * v * (CAST(ACC, 1.0f) + dl_erf(v * CAST(ACC, 0.70710678118654752f))))",
      lambda x: 0.5 * x * (1 + _np_erf(x / np.sqrt(2).astype(x.dtype))))
unary("gelu_tanh", "(CAST(ACC, 0.5f) * v * (CAST(ACC, 1.0f) + dl_tanh(CAST(ACC, 0.7978845608028654f) * "
      "(v + CAST(ACC, 0.044715f) * v * v * v))))", _gelu_tanh)
unary("softplus", "(v > CAST(ACC, 20.0f) ? v : dl_log(CAST(ACC, 1.0f) + dl_exp(v)))", lambda x: np.logaddexp(0, x))
unary("softsign", "(v / (CAST(ACC, 1.0f) + dl_abs(v)))", lambda x: x / (1 + np.abs(x)))
unary("exp", "dl_exp(v)", np.exp)
unary("log", "dl_log(v)", np.log)
unary("sqrt", "dl_sqrt(v)", np.sqrt)
unary("reciprocal", "(CAST(ACC, 1.0f) / v)", lambda x: 1 / x)
unary("neg", "(-v)", np.negative)
unary("abs", "dl_abs(v)", np.abs)
unary("erf", "dl_erf(v)", _np_erf)
unary("floor", "dl_floor(v)", np.floor)
unary("ceil", "dl_ceil(v)", np.ceil)
unary("sin", "dl_sin(v)", np.sin)
unary("cos", "dl_cos(v)", np.cos)


@register
class Clip(Unary):
    """clip(x, min, max); a missing bound is unbounded."""

    name = "clip"
    expr = "dl_min(dl_max(v, CAST(ACC, a)), CAST(ACC, b))"
    params = (("min", -math.inf), ("max", math.inf))

    def check(self, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> dict[str, Any]:
        extra = set(attrs) - {"min", "max"}
        if extra:
            raise self.error(f"unknown attribute(s) {sorted(extra)}; it takes ['max', 'min']")
        if inputs[0].dtype.kind != "f":
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

    def plan(self, inputs, outputs, attrs, info):  # float32 push constants cannot hold inf: clamp to max float
        big = float(np.finfo(np.float32).max)
        attrs = {"min": max(attrs["min"], -big), "max": min(attrs["max"], big)}
        return super().plan(inputs, outputs, attrs, info)


@register
class Cast(Op):
    """cast(x, to=dtype): conversion as NumPy's astype (floats to ints truncate toward zero)."""

    name = "cast"
    pointwise = True
    kernel_dtypes = frozenset({"float32", "float16", "float64", "int32", "int64", "uint32"})

    def check(self, inputs, attrs):
        extra = set(attrs) - {"to"}
        if extra or "to" not in attrs:
            raise self.error("takes exactly one attribute, 'to' (a dtype)")
        try:
            to = np.dtype(attrs["to"])
        except TypeError:
            raise self.error(f"'to' is not a dtype: {attrs['to']!r}") from None
        if to.kind not in "biuf":
            raise self.error(f"cannot cast to {to}")
        return {"to": to}

    def infer(self, inputs, attrs):
        return [TensorType(inputs[0].shape, attrs["to"])]

    def reference(self, inputs, attrs):
        with np.errstate(all="ignore"):
            return [inputs[0].astype(attrs["to"])]

    def unsupported(self, inputs, attrs, info):
        why = super().unsupported(inputs, attrs, info)
        if why is None and info.kernel_language != "python":
            if attrs["to"].name not in self.kernel_dtypes:
                return f"cast has no {info.kernel_language} kernel to {attrs['to']}"
            if attrs["to"].name not in info.dtypes:
                return f"{info.id} has no {attrs['to']}"
        return why

    def plan(self, inputs, outputs, attrs, info):
        src, dst = dialect_type(inputs[0].dtype), dialect_type(attrs["to"])
        via = "CAST(float, x[i])" if "f16" in (src, dst) else "x[i]"
        spec = KernelSpec(f"cast_{src}_{dst}", (Param("x", src, "in"), Param("y", dst, "out"),
                                                 Param("n", "int", "scalar")),
                          f"    FOR_EACH(i, n) {{ y[i] = CAST({dst}, {via}); }}", elem=src)
        n = inputs[0].size
        local = local_1d(info)
        return Plan([Launch(spec, (("in", 0), ("out", 0), n), groups_for(n, local, info), (local,))])

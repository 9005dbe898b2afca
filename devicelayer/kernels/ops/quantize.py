"""Linear quantization: ``quantize_linear`` and ``dequantize_linear`` (ONNX QuantizeLinear / DequantizeLinear:
per tensor, per axis and blocked scales), ``dynamic_quantize_linear`` (ONNX DynamicQuantizeLinear) and
``requantize`` (an int32 accumulator scaled to 8- or 16-bit integers: the last step of QLinearMatMul and
QLinearConv).

Scales and zero points are found by index arithmetic in the kernels: ``x`` is seen as (outer, C, inner)
around the quantization axis and element (o, c, i) reads scale ``o * so + (c / block) * sc + i * si``
(``Layout``), so one kernel serves the three granularities.  Integer results round half to even and
saturate to the output type; float8 and float4 outputs (ml_dtypes storage) are computed on the host.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..dialect import KernelSpec, Param, dialect_type
from ..op import Launch, Op, Plan, TensorType, groups_for, local_1d, register
from .binary import MAX_RANK, _broadcast_plan, _collapsed_rank, broadcast_shape
from .coverage import device_gap
from .reduce import group_local, group_reduce

#: integer storage types a quantized tensor may have, and their ranges
INT_RANGES = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767),
              "uint4": (0, 15), "int4": (-8, 7), "uint2": (0, 3), "int2": (-2, 1)}
#: float storage types a quantized tensor may have (ml_dtypes)
FLOAT_QUANT = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1fn")
_FLOAT8 = FLOAT_QUANT[:4]


def quant_dtype(op: Op, value: Any, what: str) -> np.dtype:
    """``value`` (a dtype or its name, ml_dtypes' names included) as a NumPy dtype; InvalidArgument naming
    ``what`` otherwise."""
    try:
        return np.dtype(value)
    except TypeError:
        pass
    if isinstance(value, str):
        try:
            import ml_dtypes

            return np.dtype(getattr(ml_dtypes, value))
        except (ImportError, AttributeError, TypeError):
            pass
    raise op.error(f"{what} must be a dtype, got {value!r}")


def _flag(op: Op, attrs: dict[str, Any], name: str, default: int) -> int:
    value = attrs.get(name, default)
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if not isinstance(value, (int, np.integer)) or int(value) not in (0, 1):
        raise op.error(f"attribute {name!r} must be 0 or 1, got {value!r}")
    return int(value)


def _int(op: Op, attrs: dict[str, Any], name: str, default: int) -> int:
    value = attrs.get(name, default)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise op.error(f"attribute {name!r} must be an int, got {value!r}")
    return int(value)


def _known(op: Op, attrs: dict[str, Any], known: Sequence[str]) -> None:
    extra = set(attrs) - set(known)
    if extra:
        raise op.error(f"unknown attribute(s) {sorted(extra)}; it takes {sorted(known)}")


# -- where each element finds its scale -----------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """Scale indexing of one call: element (o, c, i) of x seen as (outer, ``dim``, ``inner``) reads scale
    ``o * so + (c // block) * sc + i * si`` (all strides 0: one scale for the tensor)."""

    inner: int = 1
    dim: int = 1
    block: int = 1
    so: int = 0
    sc: int = 0
    si: int = 0
    axis: int | None = None  # the quantization axis (None: per tensor)

    @property
    def args(self) -> tuple[int, ...]:
        return (self.inner, self.dim, self.block, self.so, self.sc, self.si)

    def expand(self, value: np.ndarray, shape: Sequence[int]) -> np.ndarray:
        """``value`` (a scale or zero point) as an array broadcasting to ``shape``."""
        if self.axis is None:
            return value.reshape(())
        if self.sc and not self.si:  # per axis
            return value.reshape([value.size if d == self.axis else 1 for d in range(len(shape))])
        full = np.repeat(value, self.block, axis=self.axis)
        return full.take(np.arange(shape[self.axis]), axis=self.axis)


def layout(op: Op, x: TensorType, scale: TensorType, axis: int, block: int, what: str = "scale") -> Layout:
    """The scale layout for ``x`` (per tensor, per ``axis``, or blocks of ``block`` along it); InvalidArgument
    naming the op when ``scale``'s shape fits none."""
    rank = len(x.shape)
    if block < 0:
        raise op.error(f"block_size must be >= 0, got {block}")
    if scale.size == 1 and block == 0 and len(scale.shape) <= 1:
        return Layout()
    if not -rank <= axis < rank:
        raise op.error(f"axis {axis} is out of range for a rank-{rank} input")
    axis %= rank
    inner = math.prod(x.shape[axis + 1:])
    dim = x.shape[axis]
    if block == 0:
        if scale.shape != (dim,):
            raise op.error(f"a per-axis {what} must have shape ({dim},) (x's axis {axis}), got {scale.shape}")
        return Layout(inner, dim, 1, 0, 1, 0, axis)
    blocks = -(-dim // block)
    want = x.shape[:axis] + (blocks,) + x.shape[axis + 1:]
    if scale.shape != want:
        raise op.error(f"a blocked {what} (block_size {block} along axis {axis}) must have shape {want}, "
                       f"got {scale.shape}")
    return Layout(max(inner, 1), max(dim, 1), block, blocks * inner, inner, 1, axis)


def _check_zero_point(op: Op, zero_point: TensorType, scale: TensorType) -> None:
    """A zero point must have its scale's shape (one element each is the same per-tensor layout)."""
    if zero_point.shape != scale.shape and not (zero_point.size == scale.size == 1
                                                and len(zero_point.shape) <= 1 and len(scale.shape) <= 1):
        raise op.error(f"zero_point must have the scale's shape {scale.shape}, got {zero_point.shape}")


def _layout_of(op: Op, inputs: Sequence[TensorType | np.ndarray], attrs: dict[str, Any]) -> Layout:
    """The scale layout of a checked call."""
    x, scale = (TensorType.of(t.shape, t.dtype) for t in inputs[:2])
    return layout(op, x, scale, attrs["axis"], attrs["block_size"])


def _index_code() -> str:
    """Dialect code setting ``k``, the scale index of element ``i`` (scalars I, C, B, so, sc, si)."""
    return ("        int c = (i / I) % C;\n"
            "        int k = (i / (I * C)) * so + (c / B) * sc + (i % I) * si;\n")


_LAYOUT_PARAMS = tuple(Param(n, "int", "scalar") for n in ("n", "I", "C", "B", "so", "sc", "si"))


def _saturate_code(var: str, lo: int, hi: int, indent: str = "        ") -> str:
    """Dialect code clamping ACC ``var`` to [lo, hi] (NaN gives lo, as a C cast of NaN to int then clamped)."""
    return (f"{indent}if (dl_isnan({var})) {var} = CAST(ACC, {float(lo)});\n"
            f"{indent}{var} = {var} < CAST(ACC, {float(lo)}) ? CAST(ACC, {float(lo)}) : "
            f"({var} > CAST(ACC, {float(hi)}) ? CAST(ACC, {float(hi)}) : {var});\n")


def _saturate(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Rounded float ``values`` clamped into integer ``dtype`` (NaN gives its low end)."""
    lo, hi = INT_RANGES[dtype.name]
    out = np.clip(values, lo, hi)
    return np.where(np.isnan(out), lo, out).astype(dtype)


def _is_float(dtype: np.dtype) -> bool:
    """A float dtype scales and real values may have: float16/32/64 or bfloat16 (not a quantized float8/4)."""
    return (dtype.kind == "f" and dtype.name not in FLOAT_QUANT) or dtype.name == "bfloat16"


def _compute_dtype(*dtypes: np.dtype) -> np.dtype:
    """The float dtype quantization arithmetic runs in: NumPy's promotion of the operands (bfloat16 with
    bfloat16 stays bfloat16, with others it is float32), floats only."""
    if all(d.name == "bfloat16" for d in dtypes):
        return dtypes[0]
    ct = np.result_type(*[np.dtype(np.float32) if d.name == "bfloat16" else d for d in dtypes])
    return ct if ct.kind == "f" and ct.itemsize in (2, 4, 8) else np.dtype(np.float64)


# -- quantize_linear ----------------------------------------------------------------------------------------
@register
class QuantizeLinear(Op):
    """quantize_linear(x, scale[, zero_point]): ``saturate(round(x / scale) + zero_point)`` (ONNX
    QuantizeLinear).

    Attributes: axis (1) and block_size (0: per axis when scale is 1-D, per tensor when it has one
    element), output_dtype (the zero point's dtype when given; uint8 by default), saturate (float8 outputs:
    clamp to the finite range instead of giving inf/NaN) and precision (the float dtype of the division;
    default: NumPy's promotion of x and scale).  Rounding is half to even.
    """

    name = "quantize_linear"
    min_inputs = 2
    max_inputs = 3

    def check(self, inputs, attrs):
        _known(self, attrs, ("axis", "block_size", "output_dtype", "saturate", "precision"))
        x, scale = inputs[0], inputs[1]
        if not _is_float(x.dtype) and x.dtype != np.int32:
            raise self.error(f"x must be float or int32, got {x.dtype}")
        if not _is_float(scale.dtype) and scale.dtype != np.int32:
            raise self.error(f"scale must be float or int32, got {scale.dtype}")
        out = attrs.get("output_dtype")
        out = None if out is None else quant_dtype(self, out, "output_dtype")
        if len(inputs) == 3:
            zp = inputs[2].dtype
            if out is not None and out != zp:
                raise self.error(f"output_dtype {out} differs from the zero point's dtype {zp}")
            _check_zero_point(self, inputs[2], scale)
            out = zp
        out = np.dtype(np.uint8) if out is None else out
        if out.name not in INT_RANGES and out.name not in FLOAT_QUANT:
            raise self.error(f"cannot quantize to {out}; it quantizes to {sorted(INT_RANGES) + list(FLOAT_QUANT)}")
        precision = attrs.get("precision")
        if precision is not None:
            ct = quant_dtype(self, precision, "precision")
            if ct.name not in ("float16", "bfloat16", "float32", "float64"):
                raise self.error(f"precision must be float16, bfloat16, float32 or float64, got {ct}")
        checked = {"axis": _int(self, attrs, "axis", 1), "block_size": _int(self, attrs, "block_size", 0),
                   "output_dtype": out, "saturate": _flag(self, attrs, "saturate", 1)}
        layout(self, x, scale, checked["axis"], checked["block_size"])
        return {**checked, "precision": ct} if precision is not None else checked

    @staticmethod
    def _compute(inputs: Sequence[TensorType | np.ndarray], attrs: dict[str, Any]) -> np.dtype:
        """The dtype of the division: ``precision``, else NumPy's promotion of x and scale."""
        return attrs.get("precision") or _compute_dtype(inputs[0].dtype, inputs[1].dtype)

    def infer(self, inputs, attrs):
        return [TensorType(inputs[0].shape, attrs["output_dtype"])]

    def reference(self, inputs, attrs):
        x, scale = inputs[0], inputs[1]
        lay, out, ct = _layout_of(self, inputs, attrs), attrs["output_dtype"], self._compute(inputs, attrs)
        with np.errstate(all="ignore"):
            q = x.astype(ct) / lay.expand(scale, x.shape).astype(ct)
            if out.name in INT_RANGES:
                r = np.rint(q).astype(np.float64)
                if len(inputs) == 3:
                    r += lay.expand(inputs[2], x.shape).astype(np.float64)
                return [_saturate(r, out)]
            return [_to_float_quant(q, inputs[2] if len(inputs) == 3 else None, lay, out, attrs["saturate"])]

    def unsupported(self, inputs, attrs, info):
        return device_gap(self, [*inputs, *self.infer(inputs, attrs)], info, self._compute(inputs, attrs))

    def plan(self, inputs, outputs, attrs, info):
        x, scale = inputs[0], inputs[1]
        out, ct = outputs[0].dtype, self._compute(inputs, attrs)
        has_zp = len(inputs) == 3
        ot = dialect_type(out)
        lo, hi = INT_RANGES[out.name]
        acc = "f64" if ct == np.float64 else "float"
        rounding = "        q = CAST(ACC, CAST(f16, q));\n" if ct == np.float16 else ""
        body = ("    FOR_EACH(i, n) {\n" + _index_code()
                + "        ACC q = dl_div(CAST(ACC, x[i]), CAST(ACC, s[k]));\n" + rounding
                + f"        ACC r = dl_round(q){' + CAST(ACC, z[k])' if has_zp else ''};\n"
                + _saturate_code("r", lo, hi) + f"        y[i] = CAST({ot}, r);\n    }}")
        params = [Param("x", dialect_type(x.dtype)), Param("s", dialect_type(scale.dtype))]
        params += [Param("z", ot)] if has_zp else []
        params += [Param("y", ot, "out"), *_LAYOUT_PARAMS]
        name = (f"quantize_linear_{params[0].type}_{params[1].type}_{ot}_{dialect_type(ct)}"
                f"{'_zp' if has_zp else ''}")
        spec = KernelSpec(name, tuple(params), body, elem=acc)
        n = x.size
        bufs = [("in", 0), ("in", 1)] + ([("in", 2)] if has_zp else []) + [("out", 0)]
        local = local_1d(info)
        args = (*bufs, n, *_layout_of(self, inputs, attrs).args)
        return Plan([Launch(spec, args, groups_for(n, local, info), (local,))])


def _to_float_quant(q: np.ndarray, zero_point: np.ndarray | None, lay: Layout, out: np.dtype,
                    saturate: int) -> np.ndarray:
    """``q`` (x / scale) cast to a float8 or float4 dtype: float8 clamped to its finite range when
    ``saturate`` (NaN kept), float4 always saturating (it has no inf or NaN) after its zero point is added."""
    import ml_dtypes

    if out.name in _FLOAT8:
        if saturate:
            top = float(ml_dtypes.finfo(out).max)
            q = np.where(np.isnan(q), q, np.clip(q, -top, top))
        return q.astype(out)
    if zero_point is not None:
        q = q + lay.expand(zero_point, q.shape).astype(np.float32)
    return q.astype(out)


# -- dequantize_linear ---------------------------------------------------------------------------------------
@register
class DequantizeLinear(Op):
    """dequantize_linear(x, scale[, zero_point]): ``(x - zero_point) * scale`` (ONNX DequantizeLinear).

    x is an 8/16/32-bit integer, or int4/uint4/int2/uint2, float8 or float4 (ml_dtypes storage; a float
    zero point must be 0); attributes axis, block_size as for quantize_linear, output_dtype (the scale's
    dtype by default).  ``x - zero_point`` is computed in float32, the product in float32 (float64 when the
    scale is float64).
    """

    name = "dequantize_linear"
    min_inputs = 2
    max_inputs = 3

    def check(self, inputs, attrs):
        _known(self, attrs, ("axis", "block_size", "output_dtype"))
        x, scale = inputs[0], inputs[1]
        if x.dtype.name not in INT_RANGES and x.dtype.name not in FLOAT_QUANT and x.dtype != np.int32:
            raise self.error(f"x must be a quantized integer or float8/float4 tensor, got {x.dtype}")
        if not _is_float(scale.dtype):
            raise self.error(f"scale must be float16, bfloat16, float32 or float64, got {scale.dtype}")
        if len(inputs) == 3:
            if inputs[2].dtype != x.dtype:
                raise self.error(f"zero_point must have x's dtype {x.dtype}, got {inputs[2].dtype}")
            _check_zero_point(self, inputs[2], scale)
        out = attrs.get("output_dtype")
        out = scale.dtype if out is None else quant_dtype(self, out, "output_dtype")
        if not _is_float(out):
            raise self.error(f"output_dtype must be float16, bfloat16, float32 or float64, got {out}")
        checked = {"axis": _int(self, attrs, "axis", 1), "block_size": _int(self, attrs, "block_size", 0),
                   "output_dtype": out}
        layout(self, x, scale, checked["axis"], checked["block_size"])
        return checked

    def infer(self, inputs, attrs):
        return [TensorType(inputs[0].shape, attrs["output_dtype"])]

    @staticmethod
    def _compute(scale: np.dtype) -> np.dtype:
        return np.dtype(np.float64 if scale == np.float64 else np.float32)

    def reference(self, inputs, attrs):
        x, scale = inputs[0], inputs[1]
        lay = _layout_of(self, inputs, attrs)
        d = x.astype(np.float32)
        if len(inputs) == 3 and x.dtype.name not in FLOAT_QUANT:
            d -= lay.expand(inputs[2], x.shape).astype(np.float32)
        ct = self._compute(scale.dtype)
        return [(d.astype(ct) * lay.expand(scale, x.shape).astype(ct)).astype(attrs["output_dtype"])]

    def unsupported(self, inputs, attrs, info):
        return device_gap(self, [*inputs, *self.infer(inputs, attrs)], info, self._compute(inputs[1].dtype))

    def plan(self, inputs, outputs, attrs, info):
        x, scale = inputs[0], inputs[1]
        has_zp = len(inputs) == 3
        xt, st, yt = dialect_type(x.dtype), dialect_type(scale.dtype), dialect_type(outputs[0].dtype)
        acc = dialect_type(self._compute(scale.dtype))
        body = ("    FOR_EACH(i, n) {\n" + _index_code()
                + f"        float d = CAST(float, x[i]){' - CAST(float, z[k])' if has_zp else ''};\n"
                + f"        y[i] = CAST({yt}, CAST(ACC, d) * CAST(ACC, s[k]));\n    }}")
        params = [Param("x", xt), Param("s", st)] + ([Param("z", xt)] if has_zp else [])
        params += [Param("y", yt, "out"), *_LAYOUT_PARAMS]
        spec = KernelSpec(f"dequantize_linear_{xt}_{st}_{yt}{'_zp' if has_zp else ''}", tuple(params), body,
                          elem=acc)
        n = x.size
        bufs = [("in", 0), ("in", 1)] + ([("in", 2)] if has_zp else []) + [("out", 0)]
        local = local_1d(info)
        args = (*bufs, n, *_layout_of(self, inputs, attrs).args)
        return Plan([Launch(spec, args, groups_for(n, local, info), (local,))])


# -- requantize ---------------------------------------------------------------------------------------------
@register
class Requantize(Op):
    """requantize(acc, multiplier[, zero_point], to=dtype): ``saturate(round(acc * multiplier + zero_point))``.

    acc is an int32 accumulator (a quantized product), multiplier a float tensor and zero_point an 8/16-bit
    integer tensor, both broadcasting to acc's shape NumPy's way; the output has the zero point's dtype (or
    ``to`` without one).  The product is computed in float64 (float32 on a device without it); rounding is
    half to even.
    """

    name = "requantize"
    min_inputs = 2
    max_inputs = 3
    pointwise = True

    def check(self, inputs, attrs):
        _known(self, attrs, ("to",))
        acc, mult = inputs[0], inputs[1]
        if acc.dtype != np.int32:
            raise self.error(f"acc must be int32, got {acc.dtype}")
        if mult.dtype.kind != "f" or mult.dtype.name in FLOAT_QUANT:
            raise self.error(f"multiplier must be float16, float32 or float64, got {mult.dtype}")
        to = attrs.get("to")
        to = None if to is None else quant_dtype(self, to, "to")
        if len(inputs) == 3:
            if to is not None and to != inputs[2].dtype:
                raise self.error(f"'to' ({to}) differs from the zero point's dtype {inputs[2].dtype}")
            to = inputs[2].dtype
        if to is None or to.name not in ("uint8", "int8", "uint16", "int16"):
            raise self.error(f"needs an 8- or 16-bit integer zero point or 'to', got {to}")
        if broadcast_shape(self, [t.shape for t in inputs]) != acc.shape:
            raise self.error(f"multiplier and zero point must broadcast to acc's shape {acc.shape}")
        return {"to": to}

    def infer(self, inputs, attrs):
        return [TensorType(inputs[0].shape, attrs["to"])]

    def reference(self, inputs, attrs):
        v = inputs[0].astype(np.float64) * inputs[1].astype(np.float64)
        if len(inputs) == 3:
            v += inputs[2].astype(np.float64)
        return [_saturate(np.rint(v), attrs["to"])]

    def unsupported(self, inputs, attrs, info):
        why = device_gap(self, [*inputs, *self.infer(inputs, attrs)], info)
        if why is None and info.kernel_language != "python" and _collapsed_rank(inputs, inputs[0]) > MAX_RANK:
            why = f"{self.name}: broadcast needs more than {MAX_RANK} dimensions"
        return why

    def plan(self, inputs, outputs, attrs, info):
        out = outputs[0].dtype
        ot = dialect_type(out)
        acc = "f64" if "float64" in info.dtypes else "float"
        lo, hi = INT_RANGES[out.name]
        zp = " + CAST(ACC, p2[o2])" if len(inputs) == 3 else ""
        compute = (f"        ACC r = dl_round(CAST(ACC, p0[o0]) * CAST(ACC, p1[o1]){zp});\n"
                   + _saturate_code("r", lo, hi) + f"        y[i] = CAST({ot}, r);\n")
        buffers = [("p0", "int"), ("p1", dialect_type(inputs[1].dtype))] + ([("p2", ot)] if len(inputs) == 3 else [])
        tag = f"{buffers[1][1]}_{ot}_{acc}{'_zp' if len(inputs) == 3 else ''}"
        return _broadcast_plan(self, inputs, outputs[0], info, buffers, ot, acc, compute, tag)


# -- dynamic_quantize_linear ---------------------------------------------------------------------------------
#: work-groups of the min/max pass (each leaves one partial; the quantize pass combines them)
_PARTIALS = 64


@register
class DynamicQuantizeLinear(Op):
    """dynamic_quantize_linear(x) -> (y uint8, scale, zero_point uint8): ONNX DynamicQuantizeLinear.

    scale = (max(x, 0) - min(x, 0)) / 255 (1/255 when both are 0), zero_point = round(clamp(-min / scale,
    0, 255)), y = saturate(round(x / scale) + zero_point); computed in x's dtype (ONNX: float32; float64 is
    taken too), scale in that dtype.
    """

    name = "dynamic_quantize_linear"

    def check(self, inputs, attrs):
        _known(self, attrs, ())
        if inputs[0].dtype not in (np.float32, np.float64):
            raise self.error(f"x must be float32 (or float64), got {inputs[0].dtype}")
        return {}

    def infer(self, inputs, attrs):
        return [TensorType.of(inputs[0].shape, np.uint8), TensorType((), inputs[0].dtype), TensorType.of((), np.uint8)]

    def reference(self, inputs, attrs):
        x = inputs[0]
        f = x.dtype.type
        hi = f(max(0.0, x.max())) if x.size else f(0)
        lo = f(min(0.0, x.min())) if x.size else f(0)
        if np.isnan(x).any():
            hi = lo = f(np.nan)
        scale = (f(1.0) if hi == lo else f(hi - lo)) / f(255)
        with np.errstate(all="ignore"):
            zp = np.rint(np.clip(f(0) - lo / scale, f(0), f(255)))
            y = np.rint(x / scale) + zp
        return [_saturate(y.astype(np.float64), np.dtype(np.uint8)), np.array(scale, x.dtype),
                _saturate(np.array(zp, np.float64), np.dtype(np.uint8))]

    def unsupported(self, inputs, attrs, info):
        return device_gap(self, [*inputs, *self.infer(inputs, attrs)], info)

    def plan(self, inputs, outputs, attrs, info):
        n = inputs[0].size
        elem = dialect_type(inputs[0].dtype)
        local = group_local(info, 256)
        groups = max(1, min(_PARTIALS, -(-n // local)))
        minmax = ("    ACC lo = CAST(ACC, 0.0f);\n    ACC hi = CAST(ACC, 0.0f);\n"
                  "    for (int i = GROUP(0) * LSIZE(0) + LID(0); i < n; i += NGROUPS(0) * LSIZE(0)) {\n"
                  "        ACC v = x[i];\n        lo = dl_min(lo, v);\n        hi = dl_max(hi, v);\n    }\n"
                  + group_reduce("lo", lambda a, b: f"dl_min({a}, {b})", indent="    ")
                  + group_reduce("hi", lambda a, b: f"dl_max({a}, {b})", indent="    ")
                  + "    if (LID(0) == 0) {\n        part[2 * GROUP(0)] = lo;\n        part[2 * GROUP(0) + 1] = hi;\n"
                  "    }")
        first = KernelSpec(f"dynamic_quantize_minmax_{elem}", (Param("x", "T"), Param("part", "T", "out"),
                                                                Param("n", "int", "scalar")),
                           minmax, elem=elem, shared=(("T", "red", local),), local_size=(local,))
        quantize = ("    ACC lo = part[0];\n    ACC hi = part[1];\n"
                    "    for (int g = 1; g < parts; g++) {\n"
                    "        lo = dl_min(lo, part[2 * g]);\n        hi = dl_max(hi, part[2 * g + 1]);\n    }\n"
                    "    ACC scale = dl_div(hi == lo ? CAST(ACC, 1.0f) : hi - lo, CAST(ACC, 255.0f));\n"
                    "    ACC zf = dl_round(CAST(ACC, 0.0f) - dl_div(lo, scale));\n"
                    + _saturate_code("zf", 0, 255, "    ")
                    + "    if (GID(0) == 0) {\n        s[0] = scale;\n        z[0] = CAST(uchar, zf);\n    }\n"
                    "    FOR_EACH(i, n) {\n        ACC r = dl_round(dl_div(CAST(ACC, x[i]), scale)) + zf;\n"
                    + _saturate_code("r", 0, 255) + "        y[i] = CAST(uchar, r);\n    }")
        second = KernelSpec(f"dynamic_quantize_apply_{elem}",
                            (Param("x", "T"), Param("part", "T"), Param("y", "uchar", "out"), Param("s", "T", "out"),
                             Param("z", "uchar", "out"), Param("n", "int", "scalar"), Param("parts", "int", "scalar")),
                            quantize, elem=elem)
        apply_local = local_1d(info)
        return Plan([Launch(first, (("in", 0), ("tmp", 0), n), (groups * local,), (local,)),
                     Launch(second, (("in", 0), ("tmp", 0), ("out", 0), ("out", 1), ("out", 2), n, groups),
                            groups_for(n, apply_local, info), (apply_local,))],
                    temps=[TensorType((2 * groups,), inputs[0].dtype)])


__all__ = ["INT_RANGES", "FLOAT_QUANT", "Layout", "layout", "quant_dtype"]

"""Cast: conversion between every pair of dtypes, as ONNX's Cast defines it.

Kernels convert between the 12 kernel dtypes (bool, the sized integers, float16/32/64): to bool, nonzero
(NaN included) is true; floats to integers truncate toward zero, narrow and unsigned targets wrapping as
NumPy's conversion does on x86 where C leaves it undefined; integers to integers keep the low bits.  The
host also converts to and from bfloat16, the float8 family (saturating by default), float8 e8m0 (with its
rounding modes), float4 e2m1 and int4/uint4/int2/uint2 (``devicelayer.dtypes``).
"""

from __future__ import annotations

import functools

import numpy as np

from ...dtypes import EXTRA, dtype as resolve_dtype, finfo, is_number
from ..dialect import KernelSpec, Param, dialect_type
from ..op import Launch, Op, Plan, TensorType, groups_for, kernel_takes, local_1d, register
from .binary import float_to_int
from .numeric import KERNEL_DTYPES, kind_of

#: float8 types whose conversion saturates by default (out-of-range values and infinities go to +-max)
SATURATING = frozenset({"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"})
E8M0 = "float8_e8m0fnu"
ROUND_MODES = ("up", "down", "nearest")


def to_e8m0(x: np.ndarray, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
    """``x`` as float8 e8m0 (a power of two, its biased exponent stored): the float32 exponent, rounded up when
    any fraction bit is set ("up"), kept ("down"), or to nearest, ties up ("nearest"); NaN and inf give NaN;
    ``saturate`` keeps a rounding from the largest exponent there instead of overflowing to NaN."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.uint16)
    special = exponent == 0xFF
    if round_mode == "up":
        up = (bits & 0x7FFFFF) > 0
    elif round_mode == "nearest":
        guard = (bits & 0x400000) > 0
        up = guard & (((bits & 0x3FFFFF) > 0) | (exponent > 0))
    else:
        up = np.zeros(bits.shape, bool)
    up &= ~special
    if saturate:
        up &= exponent != 0xFE
    out = np.where(special, 0xFF, exponent + up).astype(np.uint8)
    return out.view(EXTRA[E8M0])


def convert(x: np.ndarray, to: np.dtype, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
    """``x`` converted to ``to`` as ONNX's Cast does (``saturate`` and ``round_mode`` apply to float8 targets)."""
    if to.name == E8M0:
        return to_e8m0(x.astype(np.float32), saturate, round_mode)
    if x.dtype.name in EXTRA and to.kind in "biu":
        x = x.astype(np.float32)  # exact; ml_dtypes converts to integers and bool through float
    with np.errstate(all="ignore"):
        if to.name in SATURATING and saturate and kind_of(x.dtype) != "b":
            limit = float(finfo(to).max)
            x = np.clip(x.astype(np.float32) if x.dtype.name in EXTRA else x, -limit, limit)
        return x.astype(to)


def conversion(value: str, src: np.dtype, dst: np.dtype) -> str:
    """Dialect expression converting ``value`` of kernel dtype ``src`` to kernel dtype ``dst``."""
    s, d = dialect_type(src), dialect_type(dst)
    if s in ("f16", "bf16"):  # half and bfloat16 convert through float everywhere
        value, s, src = f"CAST(float, {value})", "float", np.dtype(np.float32)
    if dst.kind == "b":
        return f"({value} != CAST({s}, 0) ? CAST(uchar, 1) : CAST(uchar, 0))"
    if d in ("f16", "bf16"):
        return f"CAST({d}, {conversion(value, src, np.dtype(np.float32))})"
    if src.kind == "f" and dst.kind in "iu":
        return float_to_int(value, s, d)
    return f"CAST({d}, {value})"


@register
class Cast(Op):
    """cast(x, to=dtype[, saturate, round_mode]): conversion as ONNX's Cast (see the module)."""

    name = "cast"
    pointwise = True
    kernel_dtypes = KERNEL_DTYPES

    def check(self, inputs, attrs):
        extra = set(attrs) - {"to", "saturate", "round_mode"}
        if extra or "to" not in attrs:
            raise self.error("takes the attribute 'to' (a dtype) and optionally 'saturate' and 'round_mode'"
                             + (f"; unknown {sorted(extra)}" if extra else ""))
        try:
            to = resolve_dtype(attrs["to"])
        except TypeError:
            raise self.error(f"'to' is not a dtype: {attrs['to']!r}") from None
        if not is_number(to):
            raise self.error(f"cannot cast to {to}")
        saturate = attrs.get("saturate", True)
        if not isinstance(saturate, (bool, int, np.integer)) or int(saturate) not in (0, 1):
            raise self.error(f"attribute 'saturate' must be 0 or 1, got {saturate!r}")
        round_mode = attrs.get("round_mode", "up")
        if isinstance(round_mode, bytes):
            round_mode = round_mode.decode(errors="replace")
        if round_mode not in ROUND_MODES:
            raise self.error(f"attribute 'round_mode' must be one of {list(ROUND_MODES)}, got {round_mode!r}")
        return {"to": to, "saturate": bool(saturate), "round_mode": round_mode}

    def infer(self, inputs, attrs):
        return [TensorType(inputs[0].shape, attrs["to"])]

    def reference(self, inputs, attrs):
        return [convert(inputs[0], attrs["to"], attrs["saturate"], attrs["round_mode"])]

    def reference_into(self, inputs, outputs, attrs):
        to = attrs["to"]
        if inputs[0].dtype.name in EXTRA or to.name in EXTRA:
            return super().reference_into(inputs, outputs, attrs)
        with np.errstate(all="ignore"):
            np.copyto(outputs[0], inputs[0], casting="unsafe")
        return None

    def bind_into(self, inputs, outputs, attrs):
        """One ``np.copyto`` where neither end is an ml_dtypes type (the host ignores floating-point errors for a
        recorded call: no ``errstate`` per call)."""
        if inputs[0].dtype.name in EXTRA or attrs["to"].name in EXTRA:
            return super().bind_into(inputs, outputs, attrs)
        return functools.partial(np.copyto, outputs[0], inputs[0], casting="unsafe")

    def unsupported(self, inputs, attrs, info):
        why = super().unsupported(inputs, attrs, info)
        if why is None and info.kernel_language != "python":
            to = attrs["to"].name
            if to not in info.dtypes:
                return f"{info.id} has no {to}"
            if not kernel_takes(self.kernel_dtypes, to, info):
                return f"cast has no {info.kernel_language} kernel to {to}"
        return why

    def plan(self, inputs, outputs, attrs, info):
        src, dst = inputs[0].dtype, attrs["to"]
        s, d = dialect_type(src), dialect_type(dst)
        spec = KernelSpec(f"cast_{src.name}_{dst.name}", (Param("x", s, "in"), Param("y", d, "out"),
                                                          Param("n", "int", "scalar")),
                          f"    FOR_EACH(i, n) {{ y[i] = {conversion('x[i]', src, dst)}; }}", elem=s)
        n = inputs[0].size
        local = local_1d(info)
        return Plan([Launch(spec, (("in", 0), ("out", 0), n), groups_for(n, local, info), (local,))])


__all__ = ["Cast", "convert", "conversion", "to_e8m0"]

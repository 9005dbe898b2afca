"""Constant and ConstantOfShape (evaluated at load time), Identity of constants, and the random generators
RandomUniform(Like), RandomNormal(Like), Bernoulli and Multinomial (seeded library ops run on the device)."""

from __future__ import annotations

import secrets
from typing import Any

import numpy as np

from ...errors import GraphError, UnsupportedOp
from ..loader import Context, np_dtype
from .base import FOLDERS, Tensor, converter, ints, pick


# -- folding helpers (constants only) ---------------------------------------------------------------------------------
def _fold_constant(ctx, attrs, ins):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in attrs:
            v = attrs[key]
            if key == "value":
                return [np.asarray(v)]
            dt = np.float32 if "float" in key else np.int64
            return [np.asarray(v, dtype=dt)]
    raise UnsupportedOp(f"Constant with {sorted(attrs)} (strings and sparse tensors are not supported)")


def _fold_constant_of_shape(ctx, attrs, ins):
    shape = ints(ins[0])
    value = attrs.get("value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    return [np.full(shape, value[0], dtype=value.dtype)]


FOLDERS["Constant"] = _fold_constant
FOLDERS["ConstantOfShape"] = _fold_constant_of_shape
FOLDERS["Identity"] = lambda ctx, attrs, ins: [ins[0]]


# -- random generators (drawn on the device at run time, never folded) ------------------------------------------------
def _seed(attrs: dict[str, Any]) -> int:
    """The library op's 64-bit seed for an ONNX float ``seed``: its float64 bits (distinct seeds stay distinct);
    a generator without one gets a fresh seed per model load, as ONNX Runtime picks one per session."""
    if "seed" not in attrs:
        return secrets.randbits(64)
    return int(np.array(float(attrs["seed"]), np.float64).view(np.uint64))


def _dtype(attrs: dict[str, Any], default: Any) -> np.dtype:
    return np_dtype(int(attrs["dtype"])) if "dtype" in attrs else np.dtype(default)


@converter("RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike")
def _random(ctx: Context, attrs: dict[str, Any]) -> list[Tensor]:
    kind = ctx.node.op_type
    op = "random_uniform" if kind.startswith("RandomUniform") else "random_normal"
    params = ("low", "high") if op == "random_uniform" else ("mean", "scale")
    if kind.endswith("Like"):
        like = ctx.raw(0)
        shape, dtype = tuple(like.shape), _dtype(attrs, like.dtype)
    else:
        if "shape" not in attrs:
            raise GraphError(f"{kind} needs its 'shape' attribute")
        shape, dtype = tuple(ints(attrs["shape"])), _dtype(attrs, np.float32)
    return [ctx.op(op, [], shape=shape, dtype=dtype, seed=_seed(attrs), **pick(attrs, *params))]


@converter("Bernoulli")
def _bernoulli(ctx: Context, attrs: dict[str, Any]) -> list[Tensor]:
    p = ctx.raw(0)
    return [ctx.op("bernoulli", [p], dtype=_dtype(attrs, p.dtype), seed=_seed(attrs))]


@converter("Multinomial")
def _multinomial(ctx: Context, attrs: dict[str, Any]) -> list[Tensor]:
    return [ctx.op("multinomial", [ctx.raw(0)], dtype=_dtype(attrs, np.int32), seed=_seed(attrs),
                   **pick(attrs, "sample_size"))]

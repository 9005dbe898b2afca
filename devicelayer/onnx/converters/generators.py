"""Constant and ConstantOfShape (evaluated at load time) and Identity of constants."""

from __future__ import annotations


import numpy as np

from ...errors import UnsupportedOp
from .base import FOLDERS, ints


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

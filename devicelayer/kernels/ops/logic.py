"""Comparisons, logic and bitwise ops: equal, less, greater, less_equal, greater_equal (bool results), logical
and/or/xor/not on bools, bitwise and/or/xor/not and bit_shift on integers, is_nan and is_inf.

The binary ones broadcast through the kernel of ``binary``; the unary ones are ``elementwise`` Unary ops."""

from __future__ import annotations

import numpy as np

from .binary import Binary, binary
from .elementwise import unary
from .numeric import INT_BITS, SIGNED_TYPES, wide, wide_unsigned
from ..dialect import dialect_type
from ..op import register

_FALSE = "CAST(uchar, 0)"

# -- comparisons: floats as ACC (NaN compares false, as in NumPy), integers and bools as T ---------------------
binary("equal", "va == vb", np.equal, "va == vb", "a == b (bool), broadcasting.", bool_expr="va == vb",
       predicate=True)
binary("less", "va < vb", np.less, "va < vb", "a < b (bool), broadcasting.", predicate=True)
binary("greater", "va > vb", np.greater, "va > vb", "a > b (bool), broadcasting.", predicate=True)
binary("less_equal", "va <= vb", np.less_equal, "va <= vb", "a <= b (bool), broadcasting.", predicate=True)
binary("greater_equal", "va >= vb", np.greater_equal, "va >= vb", "a >= b (bool), broadcasting.", predicate=True)

# -- logic on bools (bytes of 0 and 1; any nonzero byte counts as true) ------------------------------------------
binary("logical_and", "", np.logical_and, doc="a and b of bool tensors, broadcasting.",
       bool_expr=f"va != {_FALSE} && vb != {_FALSE}", predicate=True)
binary("logical_or", "", np.logical_or, doc="a or b of bool tensors, broadcasting.",
       bool_expr=f"va != {_FALSE} || vb != {_FALSE}", predicate=True)
binary("logical_xor", "", np.logical_xor, doc="a xor b of bool tensors, broadcasting.",
       bool_expr=f"(va != {_FALSE}) != (vb != {_FALSE})", predicate=True)
unary("logical_not", "", np.logical_not, bool_expr=f"v == {_FALSE}", predicate=True)

# -- bitwise on integers ---------------------------------------------------------------------------------------
binary("bitwise_and", "", np.bitwise_and, "(va & vb)", "Bitwise a & b of integer tensors, broadcasting.")
binary("bitwise_or", "", np.bitwise_or, "(va | vb)", "Bitwise a | b of integer tensors, broadcasting.")
binary("bitwise_xor", "", np.bitwise_xor, "(va ^ vb)", "Bitwise a ^ b of integer tensors, broadcasting.")
unary("bitwise_not", "", np.invert, int_expr="(~v)")

# -- floating-point classes ------------------------------------------------------------------------------------
unary("is_nan", "dl_isnan(v)", np.isnan, predicate=True)
unary("is_inf", "dl_isinf(v) && (v > CAST(ACC, 0.0f) ? b != 0.0f : a != 0.0f)",
      lambda x, negative, positive: np.isinf(x) & np.where(x > 0, positive != 0, negative != 0),
      (("detect_negative", 1.0), ("detect_positive", 1.0)), predicate=True)


def shift(a: np.ndarray, b: np.ndarray, left: bool) -> np.ndarray:
    """a << b or a >> b (arithmetic for signed a), with ONNX's rule for a shift b < 0 or >= the width: -1 for a
    right shift of a negative a, else 0."""
    bits = a.dtype.itemsize * 8
    bad = (b < 0) | (b >= bits)
    s = np.where(bad, 0, b).astype(a.dtype)
    r = np.left_shift(a, s) if left else np.right_shift(a, s)
    if np.any(bad):
        fill = np.where(a < 0, -1, 0).astype(a.dtype) if not left and a.dtype.kind == "i" else 0
        r = np.where(bad, fill, r)
    return np.asarray(r).astype(a.dtype, copy=False)


@register
class BitShift(Binary):
    """a << b or a >> b of integer tensors (``direction`` "LEFT" or "RIGHT"), broadcasting; a right shift of a
    signed integer is arithmetic; a shift by a negative amount or the width or more gives 0 (-1 for a right
    shift of a negative value)."""

    name = "bit_shift"
    kinds = "i"  # the forms are in ``compute``

    def attributes(self, attrs):
        extra = set(attrs) - {"direction"}
        if extra:
            raise self.error(f"unknown attribute(s) {sorted(extra)}; it takes ['direction']")
        direction = attrs.get("direction")
        if isinstance(direction, bytes):
            direction = direction.decode(errors="replace")
        if not isinstance(direction, str) or direction.upper() not in ("LEFT", "RIGHT"):
            raise self.error(f"attribute 'direction' must be 'LEFT' or 'RIGHT', got {direction!r}")
        return {"direction": direction.upper()}

    def variant(self, attrs):
        return attrs["direction"].lower()

    def compute_numpy(self, a, b, attrs):
        return shift(a, b, attrs["direction"] == "LEFT")

    def compute(self, inputs, attrs):
        elem = dialect_type(inputs[0].dtype)
        w, u, bits = wide(elem), wide_unsigned(elem), INT_BITS[elem]
        signed = elem in SIGNED_TYPES
        code = "        T va = p0[o0];\n        T vb = p1[o1];\n"
        bad = f"vb >= CAST(T, {bits})" + (" || vb < CAST(T, 0)" if signed else "")
        code += f"        int s = ({bad}) ? 0 : CAST(int, vb);\n"
        if attrs["direction"] == "LEFT":  # in the unsigned wide type: no signed overflow
            value = f"CAST({u}, CAST({w}, va)) << s"
            fill = "CAST(T, 0)"
        else:
            value = f"CAST({w}, va) >> s" if signed else f"CAST({u}, va) >> s"
            fill = "(va < CAST(T, 0) ? CAST(T, -1) : CAST(T, 0))" if signed else "CAST(T, 0)"
        return code + f"        y[i] = ({bad}) ? {fill} : CAST(T, {value});\n"


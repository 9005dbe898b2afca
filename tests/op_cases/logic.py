"""Cases for the comparison, logic and bitwise ops, bit_shift, is_nan and is_inf."""

import numpy as np

from op_cases import Case, inputs, rand
from op_cases.binary import INT_DTYPES, _cond, _with_nans

COMPARE = ["equal", "less", "greater", "less_equal", "greater_equal"]
LOGIC = ["logical_and", "logical_or", "logical_xor"]
BITWISE = ["bitwise_and", "bitwise_or", "bitwise_xor"]


def _ties(*shape, dtype):
    """Small integers (as ``dtype``): comparisons see equal pairs often."""
    low = -3 if np.dtype(dtype).kind in "if" else 0
    return lambda rng: rng.integers(low, 4, shape).astype(dtype)


def _specials(*shape, dtype="float32"):
    """Floats with NaN and both infinities among them."""
    def make(rng):
        v = rng.uniform(-3, 3, shape)
        pick = rng.random(shape)
        v[pick < 0.15] = np.nan
        v[(pick >= 0.15) & (pick < 0.3)] = np.inf
        v[(pick >= 0.3) & (pick < 0.45)] = -np.inf
        return v.astype(dtype)
    return make


def _shift_amounts(*shape, dtype):
    """Shift amounts past both ends: negative (signed types) and the width or more give ONNX's fill values."""
    bits = np.dtype(dtype).itemsize * 8
    low = -2 if np.dtype(dtype).kind == "i" else 0
    return rand(*shape, dtype=dtype, low=low, high=bits + 3)


def _full_range(*shape, dtype):
    info = np.iinfo(dtype)
    return lambda rng: rng.integers(int(info.min), int(info.max), shape, dtype=dtype, endpoint=True)


CASES = []
for name in COMPARE:
    for dtype in INT_DTYPES + ["float16", "float32", "float64"]:
        CASES.append(Case(name, inputs(_ties(3, 1, 5, dtype=dtype), _ties(4, 1, dtype=dtype)), id=f"{name}-{dtype}",
                          dtype=dtype, exact=True))
    CASES.append(Case(name, inputs(_with_nans(6, 50), _with_nans(50)), id=f"{name}-nan", exact=True))
    CASES.append(Case(name, inputs(rand(2, 1, 70001), rand(70001)), id=f"{name}-large", exact=True))
CASES.append(Case("equal", inputs(_cond(3, 1, 5), _cond(4, 1)), id="equal-bool", dtype="bool", exact=True))
for name in LOGIC:
    for a, b in [((7,), (7,)), ((3, 1, 5), (4, 1)), ((), (2, 3)), ((2, 1, 70001), (70001,))]:
        CASES.append(Case(name, inputs(_cond(*a), _cond(*b)), id=f"{name}-{a}-{b}", dtype="bool", exact=True))
CASES.append(Case("logical_not", inputs(_cond(3, 77)), id="logical_not", dtype="bool", exact=True))
CASES.append(Case("logical_not", inputs(_cond(2, 1, 70001)), id="logical_not-large", dtype="bool", exact=True))
for dtype in INT_DTYPES:
    for name in BITWISE:
        CASES.append(Case(name, inputs(_full_range(3, 1, 5, dtype=dtype), _full_range(4, 1, dtype=dtype)),
                          id=f"{name}-{dtype}", dtype=dtype, exact=True))
    CASES.append(Case("bitwise_not", inputs(_full_range(3, 77, dtype=dtype)), id=f"bitwise_not-{dtype}",
                      dtype=dtype, exact=True))
    for direction in ("LEFT", "RIGHT"):
        CASES.append(Case("bit_shift", inputs(_full_range(3, 1, 40, dtype=dtype), _shift_amounts(5, 1, dtype=dtype)),
                          {"direction": direction}, id=f"bit_shift-{direction}-{dtype}", dtype=dtype, exact=True))
for dtype in ("float32", "float16", "float64"):
    CASES.append(Case("is_nan", inputs(_specials(3, 77, dtype=dtype)), id=f"is_nan-{dtype}", dtype=dtype, exact=True))
    for neg, pos in ((1, 1), (0, 1), (1, 0), (0, 0)):
        CASES.append(Case("is_inf", inputs(_specials(3, 77, dtype=dtype)),
                          {"detect_negative": neg, "detect_positive": pos}, id=f"is_inf-{neg}{pos}-{dtype}",
                          dtype=dtype, exact=True))

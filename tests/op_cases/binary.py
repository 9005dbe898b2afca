"""Cases for the broadcasting binary ops, where and prelu."""

import numpy as np

from op_cases import Case, inputs, rand

ARITH = ["add", "sub", "mul", "max", "min"]  # also take integers
INT_DTYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]

# (a shape, b shape): same shapes, broadcasting both ways, size-1 dims, rank 0, empty, 6-D, one large
PAIRS = [
    ((7,), (7,)),
    ((3, 1, 5), (4, 1)),
    ((), (2, 3)),
    ((2, 3), ()),
    ((1, 1, 1), (1,)),
    ((5, 1), (1, 6)),
    ((2, 1, 3, 1, 2, 3), (1, 4, 1, 5, 1, 3)),
    ((0, 3), (3,)),
    ((2, 1, 70001), (70001,)),
    ((2, 1, 2, 1, 2, 1, 2), (2, 1, 2, 1, 2, 1)),  # 7 dimensions after collapsing: host only
]


def _away_from_zero(*shape, dtype="float32"):
    """Magnitudes in [0.5, 2], random signs (safe denominators)."""
    def make(rng):
        v = rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
        return np.asarray(v).astype(dtype)
    return make


def _pow_inputs(shape, dtype="float32", min_abs=0.0):
    """Negative bases with integral exponents, positive bases with any exponent, a few zeros."""
    def make(rng):
        base = rng.uniform(-3, 3, shape)
        base = np.where(np.abs(base) < min_abs, np.sign(base) * min_abs, base)
        expo = rng.uniform(-3, 3, shape)
        neg = base < 0
        expo[neg] = np.round(expo[neg])
        zero = rng.random(shape) < 0.05
        base[zero] = 0.0
        expo[zero] = np.abs(expo[zero]) + 0.5  # 0 ** positive
        return [base.astype(dtype), expo.astype(dtype)]
    return make


def _with_nans(*shape, dtype="float32"):
    def make(rng):
        v = rng.uniform(-2, 2, shape)
        v[rng.random(shape) < 0.2] = np.nan
        return v.astype(dtype)
    return make


def _cond(*shape, dtype="bool"):
    def make(rng):
        c = rng.random(shape) < 0.5
        if dtype != "bool":
            c = c * rng.integers(1, 100, shape)
        return np.asarray(c).astype(dtype)
    return make


CASES = []
for name in ARITH + ["div"]:
    for a, b in PAIRS:
        maker = inputs(rand(*a), _away_from_zero(*b)) if name == "div" else inputs(rand(*a), rand(*b))
        CASES.append(Case(name, maker, id=f"{name}-{a}-{b}"))
    CASES.append(Case(name, inputs(rand(4, 33, dtype="float16"), rand(33, dtype="float16", low=0.5)),
                      id=f"{name}-f16", dtype="float16"))
def int_range(dtype):
    """(low, high) covering (a part of) an integer dtype's range, negative values included where it has them."""
    info = np.iinfo(dtype)
    return max(int(info.min), -1000), min(int(info.max), 1000)


def _nonzero(*shape, dtype):
    """Random integers of ``dtype`` without zeros (divisors), negative ones where the dtype has them."""
    low, high = int_range(dtype)

    def make(rng):
        v = rng.integers(low, high, shape)
        return np.where(v == 0, 1 if low == 0 else -3, v).astype(dtype)
    return make


for name in ARITH + ["div", "mod"]:
    for dtype in INT_DTYPES:
        low, high = int_range(dtype)
        second = _nonzero(4, 1, dtype=dtype) if name in ("div", "mod") else rand(4, 1, dtype=dtype, low=low,
                                                                                 high=high)
        for fmod in ((0, 1) if name == "mod" else (None,)):
            attrs = {} if fmod is None else {"fmod": fmod}
            CASES.append(Case(name, inputs(rand(3, 1, 5, dtype=dtype, low=low, high=high), second), attrs,
                              id=f"{name}-{dtype}" + ("" if fmod is None else f"-fmod{fmod}"), dtype=dtype,
                              exact=True))
for name in ARITH + ["div"]:
    CASES.append(Case(name, inputs(rand(5, 1, 3, dtype="float64"), _away_from_zero(4, 1, dtype="float64")),
                      id=f"{name}-f64", dtype="float64"))


def _exact_division(rng):
    """int32 quotients a float32 division gets wrong: 2**24 + 1 and INT32_MAX over 1, and the extremes."""
    a = np.array([16777217, 2**31 - 1, -2**31 + 1, -2**31, 7, -7, 7, -7, 0, 5], np.int32)
    b = np.array([1, 1, 1, -1, 2, 2, -2, -2, 3, 0], np.int32)
    return [a, b]


CASES += [
    Case("div", _exact_division, id="div-int32-exact", dtype="int32", exact=True),
    Case("div", lambda rng: [np.array([2**62 + 1, -(2**62) - 3, 9], np.int64), np.array([1, 2, -4], np.int64)],
         id="div-int64-exact", dtype="int64", exact=True),
]
for dtype in INT_DTYPES:
    low = -5 if np.iinfo(dtype).min < 0 else 0
    expo_low = -2 if low < 0 else 0
    CASES.append(Case("pow", inputs(rand(6, 1, dtype=dtype, low=low, high=6), rand(9, dtype=dtype, low=expo_low,
                                                                                   high=9)),
                      id=f"pow-{dtype}", dtype=dtype, exact=True))
for dtype in ("int32", "int64"):
    CASES.append(Case("pow", inputs(rand(6, 1, dtype=dtype, low=1, high=6),
                                    lambda rng: (rng.integers(0, 8, 9) / 2).astype(np.float32)),
                      id=f"pow-{dtype}-float-exponent", dtype=dtype, exact=True))
for fmod in (0, 1):
    for dtype in ("float32", "float64", "float16"):
        CASES.append(Case("mod", inputs(rand(3, 1, 5, dtype=dtype, low=-9, high=9), _away_from_zero(4, 1, dtype=dtype)),
                          {"fmod": fmod}, id=f"mod-{dtype}-fmod{fmod}", dtype=dtype,
                          atol=1e-2 if dtype == "float16" else None))
    CASES.append(Case(name, inputs(rand(2, 1, 70001, dtype="int32", low=-9999, high=9999),
                                   rand(70001, dtype="int32", low=-9999, high=9999)),
                      id=f"{name}-int32-large", dtype="int32", exact=True))
for shape, other in [((7,), (7,)), ((3, 1, 5), (4, 1)), ((2, 1, 3, 1, 2, 3), (1, 4, 1, 5, 1, 3)),
                     ((2, 1, 70001), (70001,))]:
    CASES.append(Case("pow", lambda rng, s=shape: _pow_inputs(s)(rng), id=f"pow-{shape}", rtol=1e-4))
    CASES.append(Case("pow", inputs(rand(*shape, low=0.1, high=3), rand(*other, low=-2, high=2)),
                      id=f"pow-bcast-{shape}-{other}", rtol=1e-4))
CASES += [
    Case("pow", lambda rng: _pow_inputs((5, 40), "float16", 0.5)(rng), id="pow-f16", dtype="float16", rtol=1e-2),
    Case("div", inputs(_away_from_zero(4, 33, dtype="float16"), _away_from_zero(33, dtype="float16")),
         id="div-f16-safe", dtype="float16"),
    Case("max", inputs(_with_nans(6, 50), _with_nans(50)), id="max-nan"),
    Case("min", inputs(_with_nans(6, 50), _with_nans(6, 1)), id="min-nan"),
    Case("max", inputs(_with_nans(3, 9, dtype="float16"), _with_nans(9, dtype="float16")), id="max-nan-f16",
         dtype="float16"),
]

# where: cond types, value types, three-way broadcast
WHERE_SHAPES = [((7,), (7,), (7,)), ((3, 1, 5), (4, 1), (5,)), ((), (2, 3), (1, 3)), ((2, 1, 1), (1, 3, 1), (1, 1, 4)),
                ((2, 1, 3, 1, 2, 3), (1, 4, 1, 5, 1, 3), (3,)), ((0, 3), (3,), (1,)),
                ((2, 1, 70001), (70001,), (2, 1, 1))]
for c, x, y in WHERE_SHAPES:
    CASES.append(Case("where", inputs(_cond(*c), rand(*x), rand(*y)), id=f"where-{c}-{x}-{y}", exact=True))
for cdt in ("uint8", "int32", "int64", "int8"):
    CASES.append(Case("where", inputs(_cond(3, 1, 5, dtype=cdt), rand(4, 1), rand(5)), id=f"where-cond-{cdt}",
                      exact=True))
def any_values(*shape, dtype):
    """Random values of any kernel dtype (bools of both values, integers within their range)."""
    if dtype == "bool":
        return _cond(*shape)
    if np.dtype(dtype).kind in "iu":
        return rand(*shape, dtype=dtype, low=int_range(dtype)[0], high=int_range(dtype)[1])
    return rand(*shape, dtype=dtype, low=-100, high=100)


for vdt in ("int32", "int64", "float16", "float64", "int8", "uint16", "uint64", "bool"):
    CASES.append(Case("where", inputs(_cond(3, 1, 5), any_values(4, 1, dtype=vdt), any_values(5, dtype=vdt)),
                      id=f"where-{vdt}", dtype=vdt, exact=True))

# prelu: slope per channel, scalar, full, broadcast on trailing dims
for x, s in [((2, 3, 4, 5), (3, 1, 1)), ((7,), (1,)), ((3, 17), (3, 17)), ((4, 6), (6,)), ((2, 3, 4), ()),
             ((1, 1), (1,)), ((0, 4), (4,)), ((3, 70001), (3, 1))]:
    CASES.append(Case("prelu", inputs(rand(*x), rand(*s, low=0, high=1)), id=f"prelu-{x}-{s}"))
CASES.append(Case("prelu", inputs(rand(2, 8, 9, dtype="float16"), rand(8, 1, dtype="float16", low=0, high=1)),
                  id="prelu-f16", dtype="float16"))
CASES.append(Case("prelu", inputs(rand(2, 8, 9, dtype="float64"), rand(8, 1, dtype="float64", low=0, high=1)),
              id="prelu-f64", dtype="float64"))

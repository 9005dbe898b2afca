"""Cases for the selection ops: arg_max, arg_min, top_k (short and long lines, ties, NaN, integers)."""

import numpy as np

from op_cases import Case, inputs, rand


def _ties(*shape, dtype="float32"):
    """Few distinct values: many ties."""
    return lambda rng: [rng.integers(-2, 3, shape).astype(dtype)]


def _with_nans(*shape):
    def make(rng):
        v = rng.uniform(-2, 2, shape)
        v[rng.random(shape) < 0.05] = np.nan
        return [v.astype(np.float32)]
    return make


CASES = []
for name in ("arg_max", "arg_min"):
    for shape, attrs in (((7,), {}), ((3, 5, 4), {"axis": 1}), ((3, 5, 4), {"axis": -1, "keepdims": False}),
                         ((3, 5, 4), {"axis": 0, "select_last_index": True}), ((2, 500), {"axis": 1}),
                         ((700, 3), {"axis": 0, "keepdims": False}), ((4, 1000, 2), {"axis": 1,
                                                                                    "select_last_index": True})):
        CASES.append(Case(name, inputs(rand(*shape)), attrs, id=f"{name}-{shape}-{attrs}"))
    for last in (False, True):
        CASES.append(Case(name, _ties(6, 9), {"axis": 1, "select_last_index": last}, id=f"{name}-ties-{last}"))
        CASES.append(Case(name, _ties(3, 300), {"axis": 1, "select_last_index": last}, id=f"{name}-ties-long-{last}"))
        CASES.append(Case(name, _with_nans(8, 20), {"axis": 1, "select_last_index": last}, id=f"{name}-nan-{last}"))
        CASES.append(Case(name, _with_nans(3, 400), {"axis": 1, "select_last_index": last},
                          id=f"{name}-nan-long-{last}"))
    for dtype in ("int32", "int64", "uint8", "int8", "float16", "float64"):
        CASES.append(Case(name, _ties(5, 11, dtype=dtype), {"axis": 1}, id=f"{name}-{dtype}", dtype=dtype))
for shape, attrs in (((9,), {"k": 3}), ((3, 5, 4), {"k": 2, "axis": 1}), ((3, 5, 4), {"k": 4, "axis": -1,
                                                                                     "largest": False}),
                     ((3, 5, 4), {"k": 0, "axis": 0}), ((3, 5, 4), {"k": 5, "axis": 1}),
                     ((2, 600), {"k": 7}), ((500, 3), {"k": 10, "axis": 0, "largest": False})):
    CASES.append(Case("top_k", inputs(rand(*shape)), attrs, id=f"top_k-{shape}-{attrs}"))
for largest in (True, False):
    CASES.append(Case("top_k", _ties(6, 9), {"k": 6, "largest": largest}, id=f"top_k-ties-{largest}"))
    CASES.append(Case("top_k", _ties(2, 300), {"k": 20, "largest": largest}, id=f"top_k-ties-long-{largest}"))
    CASES.append(Case("top_k", _with_nans(8, 20), {"k": 5, "largest": largest}, id=f"top_k-nan-{largest}"))
for dtype in ("int32", "int64", "uint64", "int16", "float16", "float64"):
    CASES.append(Case("top_k", _ties(5, 11, dtype=dtype) if dtype[0] != "u" else inputs(rand(5, 11, dtype=dtype,
                                                                                              low=0, high=9)),
                      {"k": 4}, id=f"top_k-{dtype}", dtype=dtype))

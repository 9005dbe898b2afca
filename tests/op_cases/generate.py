"""Cases for range, fill, eye_like, trilu and one_hot."""

import numpy as np

from op_cases import Case, inputs, rand


def _scalars(start, delta, dtype):
    return lambda rng: [np.array(start, dtype), np.array(delta, dtype)]


def _indices(shape, low, high, dtype="int64"):
    return lambda rng: [rng.integers(low, high, shape).astype(dtype), np.array([-1.5, 2.25], np.float32)]


CASES = [
    Case("range", _scalars(1.5, 0.25, "float32"), {"n": 9}, id="range-float32"),
    Case("range", _scalars(-3.0, 0.125, "float64"), {"n": 1000}, id="range-float64", dtype="float64"),
    Case("range", _scalars(2.0, 0.5, "float16"), {"n": 7}, id="range-float16", dtype="float16"),
    Case("range", _scalars(10, -3, "int32"), {"n": 4}, id="range-int32", dtype="int32"),
    Case("range", _scalars(-(2**40), 2**33 + 1, "int64"), {"n": 300}, id="range-int64", dtype="int64"),
    Case("range", _scalars(5, -1, "int16"), {"n": 5}, id="range-int16", dtype="int16"),
    Case("range", _scalars(1, 2, "int32"), {"n": 0}, id="range-empty", dtype="int32"),
    Case("range", lambda rng: [np.array([2.0], np.float32), np.array([[0.5]], np.float32)], {"n": 3},
         id="range-one-value-tensors"),
]
for dtype, value in (("float32", 1.25), ("float16", -2.5), ("float64", 3.0), ("int64", -2**40), ("int8", -7),
                     ("uint16", 500), ("bool", True), ("int32", 9)):
    for shape in ((2, 3, 4), (), (5000,)):
        CASES.append(Case("fill", lambda rng, v=value, d=dtype: [np.array([v], d)], {"shape": shape},
                          id=f"fill-{dtype}-{shape}", dtype=dtype))
for dtype in ("float32", "int64", "bool", "float16", "int8", "uint16", "float64"):
    for shape, k in (((4, 5), 0), ((5, 3), 1), ((3, 6), -2), ((3, 3), 5), ((1, 7), -9)):
        CASES.append(Case("eye_like", inputs(rand(*shape)), {"k": k, "dtype": dtype}, id=f"eye_like-{shape}-{k}-{dtype}",
                          dtype=dtype))
CASES.append(Case("eye_like", inputs(rand(4, 4, dtype="int32")), {}, id="eye_like-of-x-dtype", dtype="int32"))
for upper in (True, False):
    for shape, k in (((4, 5), 0), ((2, 3, 5, 4), 1), ((3, 6), -2), ((3, 3), 5), ((3, 3), -5), ((1, 7), -1),
                     ((300, 200), 17)):
        CASES.append(Case("trilu", inputs(rand(*shape)), {"upper": upper, "k": k}, id=f"trilu-{upper}-{shape}-{k}"))
    for dtype in ("int64", "float16", "int8", "uint16", "float64"):
        CASES.append(Case("trilu", inputs(rand(3, 4, 5, dtype=dtype, low=1, high=9)), {"upper": upper, "k": -1},
                          id=f"trilu-{upper}-{dtype}", dtype=dtype))
    CASES.append(Case("trilu", lambda rng: [rng.random((4, 6)) < 0.5], {"upper": upper}, id=f"trilu-{upper}-bool",
                      dtype="bool"))
for axis in (-1, 0, 1, -2, 2):
    CASES.append(Case("one_hot", _indices((3, 4), -6, 8), {"depth": 5, "axis": axis}, id=f"one_hot-axis{axis}"))
for dtype in ("int32", "float32", "float64", "int8", "uint8", "float16"):
    CASES.append(Case("one_hot", lambda rng, d=dtype: [rng.uniform(-4, 6, (5, 3)).astype(d) if d[0] == "f"
                                                        else rng.integers(-4 if d[0] == "i" else 0, 6, (5, 3)).astype(d),
                                                        np.array([0, 1], np.float32)],
                      {"depth": 4}, id=f"one_hot-{dtype}-indices", dtype=dtype))
for dtype in ("int64", "bool", "float16", "uint8"):
    CASES.append(Case("one_hot", lambda rng, d=dtype: [rng.integers(-3, 3, (6,)), np.array([0, 1]).astype(d)],
                      {"depth": 3, "axis": 0}, id=f"one_hot-{dtype}-values", dtype=dtype))
CASES.append(Case("one_hot", _indices((), -2, 3), {"depth": 3}, id="one_hot-scalar"))
CASES.append(Case("one_hot", _indices((0, 2), -2, 3), {"depth": 3, "axis": 1}, id="one_hot-empty"))

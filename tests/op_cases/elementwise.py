"""Cases for the unary elementwise ops."""

import numpy as np

from op_cases import Case, inputs, rand

SHAPES = [(1,), (7,), (3, 5, 17), (1000,), (2, 1, 70001)]
UNARY = ["relu", "leaky_relu", "elu", "selu", "celu", "sigmoid", "hard_sigmoid", "hard_swish", "swish", "mish",
         "thresholded_relu", "shrink", "tanh", "gelu", "gelu_tanh", "softplus", "softsign", "exp", "neg", "abs",
         "sign", "erf", "floor", "ceil", "round", "sin", "cos", "tan", "sinh", "cosh", "asinh", "atan"]
POSITIVE = ["log", "sqrt", "reciprocal"]
#: ops defined on (-1, 1) and on [1, inf)
UNIT = ["asin", "acos", "atanh"]
ABOVE_ONE = ["acosh"]
#: integer forms
INTEGER = ["relu", "neg", "abs", "sign"]
INT_DTYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]


def _halves(*shape, dtype="float32"):
    """Values with many exact halves (round half to even) and nothing at zero."""
    def make(rng):
        v = rng.integers(-40, 40, shape) / 2 + rng.choice([0.0, 0.25, 0.3], shape)
        return np.where(v == 0, 0.75, v).astype(dtype)
    return make


def _domain(name):
    if name in POSITIVE:
        return dict(low=0.1, high=9)
    if name in UNIT:
        return dict(low=-0.95, high=0.95)
    if name in ABOVE_ONE:
        return dict(low=1.05, high=9)
    if name in ("cosh", "sinh"):
        return dict(low=-5, high=5)
    return dict(low=-6, high=6)


CASES = []
for name in UNARY + POSITIVE + UNIT + ABOVE_ONE:
    dom = _domain(name)
    for shape in SHAPES:
        CASES.append(Case(name, inputs(rand(*shape, **dom)), id=f"{name}-{shape}"))
    half = {k: v / 2 if name not in POSITIVE + ABOVE_ONE else v for k, v in dom.items()}
    CASES.append(Case(name, inputs(rand(4, 33, dtype="float16", **half)), id=f"{name}-f16", dtype="float16"))
    CASES.append(Case(name, inputs(rand(3, 257, dtype="float64", **dom)), id=f"{name}-f64", dtype="float64"))
for name in INTEGER:
    for dt in INT_DTYPES:
        low = 0 if dt.startswith("u") else -100
        CASES.append(Case(name, inputs(rand(3, 77, dtype=dt, low=low, high=100)), id=f"{name}-{dt}", dtype=dt,
                          exact=True))
CASES += [
    Case("round", inputs(_halves(5, 40)), id="round-halves"),
    Case("round", inputs(_halves(5, 40, dtype="float64")), id="round-halves-f64", dtype="float64"),
    Case("leaky_relu", inputs(rand(100)), {"alpha": 0.3}, id="leaky-alpha"),
    Case("elu", inputs(rand(100)), {"alpha": 0.5}, id="elu-alpha"),
    Case("selu", inputs(rand(100)), {"alpha": 1.5, "gamma": 2.0}, id="selu-attrs"),
    Case("celu", inputs(rand(100)), {"alpha": 2.5}, id="celu-alpha"),
    Case("swish", inputs(rand(100)), {"alpha": 0.7}, id="swish-alpha"),
    Case("thresholded_relu", inputs(rand(100)), {"alpha": 0.4}, id="thresholded-alpha"),
    Case("shrink", inputs(rand(100)), {"bias": 0.3, "lambd": 1.1}, id="shrink-attrs"),
    Case("hard_sigmoid", inputs(rand(100, low=-5, high=5)), {"alpha": 0.1, "beta": 0.6}, id="hsig-attrs"),
    Case("clip", inputs(rand(3, 40)), {"min": -0.5, "max": 0.7}, id="clip-both"),
    Case("clip", inputs(rand(3, 40)), {"min": 0.0}, id="clip-min"),
    Case("clip", inputs(rand(3, 40)), {"max": 0.25}, id="clip-max"),
    Case("clip", inputs(rand(3, 40)), {}, id="clip-none"),
    Case("clip", inputs(rand(3, 40, dtype="float64")), {"min": -0.123456789012, "max": 0.7}, id="clip-f64",
         dtype="float64"),
]

"""Cases for fused_elementwise: chains of pointwise ops with broadcasting, several outputs and mixed dtypes."""

import numpy as np

from op_cases import Case, inputs, rand


def _const(value, dtype="float32", shape=()):
    return lambda rng: np.full(shape, value, dtype)


def _steps(*steps):
    return tuple((op, attrs, tuple(operands)) for op, attrs, operands in steps)


# gelu written out: x * 0.5 * (1 + erf(x * sqrt(1/2))), the constants as rank-0 inputs
_GELU = _steps(("mul", {}, (0, 1)), ("erf", {}, (3,)), ("add", {}, (4, 2)), ("mul", {}, (0, 5)),
               ("mul", {}, (6, 3)))
_GELU_IN = (rand(4, 33), _const(np.sqrt(0.5)), _const(1.0), _const(0.5))
_GELU_HALF_IN = (rand(4, 33, dtype="float16"), _const(np.sqrt(0.5), "float16"), _const(1.0, "float16"),
                 _const(0.5, "float16"))
# broadcasting both ways, two outputs (an intermediate and the end)
_BROADCAST = _steps(("add", {}, (0, 1)), ("relu", {}, (3,)), ("mul", {}, (4, 2)), ("leaky_relu", {"alpha": 0.2}, (5,)))
# float -> bool -> where -> int -> float
_MIXED = _steps(("greater", {}, (0, 1)), ("where", {}, (3, 0, 1)), ("cast", {"to": np.dtype("int32")}, (4,)),
                ("add", {}, (5, 2)), ("cast", {"to": np.dtype("float32")}, (6,)), ("sigmoid", {}, (7,)))
_INTS = _steps(("add", {}, (0, 1)), ("mul", {}, (2, 0)), ("abs", {}, (3,)), ("bitwise_xor", {}, (4, 1)),
               ("neg", {}, (5,)), ("div", {}, (6, 1)))
_HALF = _steps(("sigmoid", {}, (0,)), ("mul", {}, (2, 1)), ("tanh", {}, (3,)), ("sub", {}, (4, 0)))
_WIDE = _steps(("clip", {"min": -1.5, "max": float("inf")}, (0,)), ("leaky_relu", {"alpha": 0.1}, (2,)),
               ("mul", {}, (3, 1)), ("exp", {}, (4,)))

CASES = [
    Case("fused_elementwise", inputs(*_GELU_IN), {"steps": _GELU, "outputs": (4,)}, id="gelu_chain"),
    Case("fused_elementwise", inputs(*_GELU_HALF_IN), {"steps": _GELU, "outputs": (4,)}, id="gelu_chain_f16",
         dtype="float16"),
    Case("fused_elementwise", inputs(rand(3, 1, 5), rand(4, 1), rand(5)), {"steps": _BROADCAST, "outputs": (1, 3)},
         id="broadcast_two_outputs"),
    Case("fused_elementwise", inputs(rand(2, 3, 4), rand(3, 1), rand(2, 1, 4, dtype="int32", low=-5, high=5)),
         {"steps": _MIXED, "outputs": (0, 2, 5)}, id="mixed_dtypes"),
    Case("fused_elementwise", inputs(rand(6, 7, dtype="int32", low=-50, high=50),
                                     rand(7, dtype="int32", low=1, high=9)),
         {"steps": _INTS, "outputs": (5,)}, id="int32", exact=True),
    Case("fused_elementwise", inputs(rand(6, 7, dtype="int64", low=-50, high=50),
                                     rand(6, 1, dtype="int64", low=1, high=9)),
         {"steps": _INTS, "outputs": (3, 5)}, id="int64", dtype="int64", exact=True),
    Case("fused_elementwise", inputs(rand(5, 9, dtype="float16"), rand(9, dtype="float16")),
         {"steps": _HALF, "outputs": (3,)}, id="float16", dtype="float16"),
    Case("fused_elementwise", inputs(rand(3, 8, dtype="float64"), rand(3, 1, dtype="float64")),
         {"steps": _WIDE, "outputs": (3,)}, id="float64", dtype="float64"),
    Case("fused_elementwise", inputs(rand(2, 1, 70001), rand(70001), rand(2, 1, 1)),
         {"steps": _BROADCAST, "outputs": (1, 3)}, id="large"),
    Case("fused_elementwise", inputs(rand(0, 3), rand(3), rand(3)), {"steps": _BROADCAST, "outputs": (3,)},
         id="empty"),
]

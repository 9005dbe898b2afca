"""Cases for the reductions: sum, mean, reduce_max, reduce_min, reduce_prod, reduce_l1, reduce_l2,
reduce_sum_square, reduce_log_sum, reduce_log_sum_exp; floats, integers (exact), bool, empty reductions."""

import numpy as np

from op_cases import Case, inputs, rand

REDUCE = ["sum", "mean", "reduce_max", "reduce_min"]
NEW = ["reduce_prod", "reduce_l1", "reduce_l2", "reduce_sum_square", "reduce_log_sum", "reduce_log_sum_exp"]
#: integer reductions (computed exactly)
INTEGER = ["sum", "mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_l1", "reduce_sum_square"]

# (shape, attrs): all axes, one axis, negative axes, several non-adjacent axes, no axes, keepdims, rank 0,
# size-1 dims, and long reductions (one work-group per output) along contiguous and strided axes
LAYOUTS = [
    ((7,), {}),
    ((3, 5, 17), {}),
    ((3, 5, 17), {"axes": 0}),
    ((3, 5, 17), {"axes": -1}),
    ((3, 5, 17), {"axes": [0, 2]}),
    ((3, 5, 17), {"axes": (-3, -2), "keepdims": True}),
    ((3, 5, 17), {"axes": [1], "keepdims": True}),
    ((3, 5, 17), {"axes": []}),
    ((2, 3, 4, 5, 6), {"axes": [0, 2, 4]}),
    ((2, 3, 4, 5, 6, 2), {"axes": [1, 3, 5], "keepdims": True}),
    ((), {}),
    ((1, 1, 9, 1), {"axes": [0, 2]}),
    ((4, 1), {"axes": 1}),
    ((2, 70001), {"axes": -1}),
    ((70001, 3), {"axes": 0}),
    ((300, 130), {"axes": 1}),
    ((5, 129, 7), {"axes": [0, 1]}),
    ((1000, 3, 7), {"axes": (0, 2), "keepdims": True}),
    ((3, 200001), {}),
]
#: the layouts the newer reductions run (short and long, kept and reduced dims strided both ways)
SOME = [LAYOUTS[k] for k in (0, 2, 4, 5, 10, 15, 16)]


def _with_nans(*shape):
    def make(rng):
        v = rng.uniform(-2, 2, shape)
        v[rng.random(shape) < 0.01] = np.nan
        return v.astype(np.float32)
    return make


def _positive(*shape, dtype="float32"):
    return rand(*shape, dtype=dtype, low=0.8, high=1.25)


CASES = []
for name in REDUCE:
    for shape, attrs in LAYOUTS:
        CASES.append(Case(name, inputs(rand(*shape)), attrs, id=f"{name}-{shape}-{attrs}"))
for name in NEW:
    for shape, attrs in SOME:
        make = _positive(*shape) if name in ("reduce_prod", "reduce_log_sum") else rand(*shape)
        CASES.append(Case(name, inputs(make), attrs, id=f"{name}-{shape}-{attrs}"))
for name in REDUCE + NEW:
    positive = name in ("reduce_prod", "reduce_log_sum")
    make16 = _positive if positive else lambda *s, dtype: rand(*s, dtype=dtype)
    CASES.append(Case(name, inputs(make16(4, 300, dtype="float16")), {"axes": 1}, id=f"{name}-f16-long",
                      dtype="float16"))
    CASES.append(Case(name, inputs(make16(4, 30, dtype="float16")), {"axes": 0}, id=f"{name}-f16-short",
                      dtype="float16"))
    CASES.append(Case(name, inputs(make16(5, 40, dtype="float64")), {"axes": 1}, id=f"{name}-f64-short",
                      dtype="float64"))
    CASES.append(Case(name, inputs(make16(3, 500, dtype="float64")), {"axes": -1, "keepdims": True},
                      id=f"{name}-f64-long", dtype="float64"))
    if not positive:
        CASES.append(Case(name, inputs(_with_nans(8, 20)), {"axes": 1}, id=f"{name}-nan-short"))
        CASES.append(Case(name, inputs(_with_nans(3, 1000)), {"axes": 1}, id=f"{name}-nan-long"))
    # empty reductions give the identity (-inf for max and the log-sums, NaN for mean); empty outputs
    CASES += [
        Case(name, inputs(rand(3, 0)), {"axes": 1}, id=f"{name}-empty-axis"),
        Case(name, inputs(rand(0, 4)), {"axes": 0, "keepdims": True}, id=f"{name}-empty-axis0"),
        Case(name, inputs(rand(0)), {}, id=f"{name}-empty-all"),
        Case(name, inputs(rand(0, 4)), {"axes": 1}, id=f"{name}-empty-output"),
    ]
# integers: exact, wrapping as the element type does
for name in INTEGER:
    for dtype, low, high in (("int32", -100, 100), ("int64", -10**12, 10**12), ("int8", -9, 9), ("uint8", 0, 9),
                             ("int16", -300, 300), ("uint32", 0, 1000), ("uint64", 0, 10**12)):
        if name in ("reduce_prod", "reduce_sum_square") and dtype in ("int64", "uint64"):
            low, high = (-1000, 1000) if dtype == "int64" else (0, 1000)
        CASES.append(Case(name, inputs(rand(6, 7, dtype=dtype, low=low, high=high)), {"axes": 1},
                          id=f"{name}-{dtype}-short", dtype=dtype))
        CASES.append(Case(name, inputs(rand(3, 300, dtype=dtype, low=low, high=high)), {"axes": [0, 1]},
                          id=f"{name}-{dtype}-long", dtype=dtype))
    CASES.append(Case(name, inputs(rand(3, 0, dtype="int32")), {"axes": 1}, id=f"{name}-int32-empty",
                      dtype="int32"))
    CASES.append(Case(name, inputs(rand(2, 0, dtype="int8")), {"axes": 1}, id=f"{name}-int8-empty", dtype="int8"))
# bool: max is any, min is all (an empty max is false, an empty min true)
for name in ("reduce_max", "reduce_min"):
    for shape, attrs in (((5, 6), {"axes": 1}), ((4, 200), {"axes": 1}), ((3, 0), {"axes": 1}),
                         ((2, 3, 4), {"axes": [0, 2], "keepdims": True})):
        CASES.append(Case(name, lambda rng, s=shape: [rng.random(s) < 0.15], attrs, id=f"{name}-bool-{shape}",
                          dtype="bool"))

"""Cases for matmul (NumPy semantics) and gemm (ONNX Gemm)."""

from op_cases import Case, inputs, rand

# (a shape, b shape): odd sizes around the 64 x 64 tile and 16-wide K slice, 1-D operands,
# broadcast batches (either side, both, three broadcast patterns), size-1 dims, empty, K = 0, one large
MATMUL = [
    ((1, 1), (1, 1)),
    ((7, 5), (5, 3)),
    ((64, 64), (64, 64)),
    ((65, 17), (17, 129)),
    ((130, 70), (70, 66)),
    ((33,), (33,)),
    ((20,), (20, 90)),
    ((90, 20), (20,)),
    ((20,), (3, 20, 90)),
    ((3, 70, 20), (20,)),
    ((2, 3, 70, 20), (20, 90)),
    ((70, 20), (4, 20, 33)),
    ((3, 1, 70, 20), (4, 20, 90)),
    ((2, 1, 2, 33, 17), (1, 2, 1, 17, 40)),
    ((1, 1, 40, 30), (1, 30, 50)),
    ((5, 1, 30), (5, 30, 1)),
    ((0, 5), (5, 3)),
    ((2, 0, 3, 4), (4, 5)),
    ((4, 0), (0, 6)),
    ((3, 16, 0), (3, 0, 20)),
    ((300, 500), (500, 260)),
]

GEMM = [  # (A shape, B shape, C shape or None, attrs)
    ((7, 5), (5, 3), None, {}),
    ((70, 33), (33, 80), (80,), {}),
    ((33, 70), (33, 80), (70, 80), {"transA": 1}),
    ((70, 33), (80, 33), (70, 1), {"transB": 1}),
    ((33, 70), (80, 33), (1, 80), {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}),
    ((17, 65), (65, 129), (), {"alpha": -1.5, "beta": 0.25}),
    ((17, 65), (65, 129), (1,), {"beta": 0.0}),
    ((17, 65), (65, 129), (1, 1), {}),
    ((1, 40), (40, 90), (90,), {"alpha": 2.0}),
    ((40, 1), (40, 90), None, {"transA": 1}),
    ((5, 0), (0, 6), (5, 6), {"beta": 3.0}),
    ((0, 5), (5, 6), (6,), {}),
    ((256, 300), (200, 300), (200,), {"transB": 1, "alpha": 0.75}),
]

CASES = []
for a, b in MATMUL:
    CASES.append(Case("matmul", inputs(rand(*a), rand(*b)), id=f"{a}x{b}"))
CASES.append(Case("matmul", inputs(rand(3, 40, 30, dtype="float16"), rand(30, 33, dtype="float16")),
                  id="f16", dtype="float16"))
CASES.append(Case("matmul", inputs(rand(6, 5, dtype="float64"), rand(5, 4, dtype="float64")), id="f64",
                  dtype="float64"))
CASES.append(Case("matmul", inputs(rand(2, 70, 45, dtype="float64"), rand(45, 66, dtype="float64")), id="f64-tiled",
                  dtype="float64"))
CASES.append(Case("matmul", inputs(rand(6, 5, dtype="int32", low=-9, high=9), rand(5, 4, dtype="int32", low=-9, high=9)),
                  id="i32", dtype="int32", exact=True))
for a, b, c, attrs in GEMM:
    makers = [rand(*a), rand(*b)] + ([rand(*c)] if c is not None else [])
    CASES.append(Case("gemm", inputs(*makers), attrs, id=f"{a}x{b}+{c}-{attrs}"))
CASES.append(Case("gemm", inputs(rand(40, 30, dtype="float16"), rand(33, 30, dtype="float16"),
                                 rand(33, dtype="float16")), {"transB": 1, "alpha": 0.5}, id="f16", dtype="float16"))
CASES.append(Case("gemm", inputs(rand(40, 70, dtype="float64"), rand(70, 33, dtype="float64"),
                                 rand(33, dtype="float64")), {"transA": 0, "beta": 0.5}, id="f64", dtype="float64"))


def _integer_inputs(a_shape, b_shape, a_dtype, b_dtype, za_shape=(), zb_shape=()):
    def make(rng):
        lo_a, hi_a = (-128, 128) if a_dtype == "int8" else (0, 256) if a_dtype == "uint8" else (-3000, 3000)
        lo_b, hi_b = (-128, 128) if b_dtype == "int8" else (0, 256) if b_dtype == "uint8" else (-3000, 3000)
        if a_dtype == "uint16":
            lo_a, hi_a = 0, 6000
        return [rng.integers(lo_a, hi_a, a_shape).astype(a_dtype), rng.integers(lo_b, hi_b, b_shape).astype(b_dtype),
                rng.integers(lo_a, hi_a, za_shape).astype(a_dtype), rng.integers(lo_b, hi_b, zb_shape).astype(b_dtype)]
    return make


for a_shape, b_shape, a_dt, b_dt, za, zb, tag in [
        ((4, 3), (3, 2), "uint8", "uint8", (), (), "2d"),
        ((7, 33), (33, 5), "int8", "int8", (1,), (1,), "int8"),
        ((7, 33), (33, 5), "uint8", "int8", (7,), (5,), "per-row-column"),
        ((2, 3, 9, 16), (16, 11), "uint8", "uint8", (), (11,), "batch"),
        ((3, 1, 9, 16), (4, 16, 11), "int8", "uint8", (9,), (), "broadcast"),
        ((16,), (16, 11), "uint8", "uint8", (), (), "vector-matrix"),
        ((5, 16), (16,), "int16", "int16", (5,), (), "int16"),
        ((3, 70, 300), (300, 90), "uint8", "int8", (), (90,), "large"),
        ((2, 1, 40, 37), (3, 37, 50), "int8", "int8", (40,), (50,), "tiled-per-row-column-broadcast"),
        ((0, 5), (5, 3), "uint16", "uint16", (), (), "empty")]:
    CASES.append(Case("matmul_integer", _integer_inputs(a_shape, b_shape, a_dt, b_dt, za, zb), id=tag,
                      dtype=a_dt, exact=True))

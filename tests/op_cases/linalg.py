"""Cases for diagonal and det."""

import numpy as np

from op_cases import Case, inputs, rand

CASES = []

for shape, axes, dtype in [((4, 4), (0, 1), "float32"), ((3, 5, 5), (1, 2), "float64"), ((5, 2, 5), (0, 2), "int64"),
                           ((3, 3, 3), (0, 1, 2), "float32"), ((2, 4, 3, 4, 4), (1, 3, 4), "float16"),
                           ((6, 2, 6), (-1, 0), "int8"), ((0, 3, 3), (1, 2), "float32")]:
    CASES.append(Case("diagonal", inputs(rand(*shape, dtype=dtype, low=-50, high=50)), {"axes": axes},
                      id=f"{shape}-{axes}-{dtype}", dtype=dtype, exact=True))


def _well_conditioned(*shape, dtype="float32"):
    """Matrices with a dominant diagonal of random signs (determinants far from 0), rows shuffled (pivoting)."""
    def make(rng):
        m = shape[-1]
        x = rng.uniform(-1, 1, shape) + np.eye(m) * rng.choice([-3.0, 3.0], shape[:-1])[..., None]
        return [x[..., rng.permutation(m), :].astype(dtype)]
    return make


for shape in [(2, 2), (3, 2, 2), (4, 4), (2, 3, 5, 5), (1, 1), (7, 9, 9), (0, 3, 3)]:
    CASES.append(Case("det", _well_conditioned(*shape), id=f"{shape}", rtol=1e-4))
CASES.append(Case("det", _well_conditioned(3, 6, 6, dtype="float64"), id="f64", dtype="float64"))
CASES.append(Case("det", _well_conditioned(3, 4, 4, dtype="float16"), id="f16", dtype="float16"))
CASES.append(Case("det", lambda rng: [np.array([[1.0, 2.0], [2.0, 4.0]], np.float32)], id="singular", atol=1e-6))

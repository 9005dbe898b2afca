"""Cases for nll_loss: every reduction, with and without weights, ignore_index (in range, negative, never hit),
rank 2 to 5, int32 and int64 targets, long reductions (work-group partials), float16 and float64."""

import numpy as np

from op_cases import Case


def _nll(x_shape, weighted=False, dtype="float32", target_dtype="int64", ignore=None):
    """x of ``x_shape`` (log-probabilities), targets in [0, C) with some set to ``ignore``, weights."""
    def make(rng):
        C = x_shape[1]
        x = rng.uniform(-4, -0.05, x_shape).astype(dtype)
        t = rng.integers(0, C, (x_shape[0],) + tuple(x_shape[2:])).astype(target_dtype)
        if ignore is not None and t.size > 1:
            t.reshape(-1)[::3] = ignore
        arrays = [x, t]
        if weighted:
            arrays.append(rng.uniform(0.2, 2.0, C).astype(dtype))
        return arrays
    return make


CASES = []
for reduction in ("none", "sum", "mean"):
    r = {"reduction": reduction}
    CASES += [
        Case("nll_loss", _nll((3, 5)), r, id=f"nll-{reduction}-2d"),
        Case("nll_loss", _nll((3, 5, 2), weighted=True), r, id=f"nll-{reduction}-3d-weight"),
        Case("nll_loss", _nll((3, 5, 6, 6), ignore=1), {**r, "ignore_index": 1}, id=f"nll-{reduction}-4d-ii"),
        Case("nll_loss", _nll((3, 5, 6), weighted=True, ignore=-1), {**r, "ignore_index": -1},
             id=f"nll-{reduction}-weight-negative-ii"),
        Case("nll_loss", _nll((2, 4, 3, 2, 5), target_dtype="int32", ignore=-5), {**r, "ignore_index": -5},
             id=f"nll-{reduction}-5d-int32"),
        Case("nll_loss", _nll((3, 5), weighted=True), {**r, "ignore_index": 10}, id=f"nll-{reduction}-ii-unused"),
        Case("nll_loss", _nll((64, 10, 40), weighted=True, ignore=3), {**r, "ignore_index": 3},
             id=f"nll-{reduction}-long"),
        Case("nll_loss", _nll((4, 6, 3), weighted=True, dtype="float16"), r, id=f"nll-{reduction}-f16",
             dtype="float16"),
        Case("nll_loss", _nll((4, 6, 3), weighted=True, dtype="float64", ignore=2), {**r, "ignore_index": 2},
             id=f"nll-{reduction}-f64", dtype="float64"),
    ]
CASES.append(Case("nll_loss", _nll((3, 5)), {}, id="nll-default-mean"))
CASES.append(Case("nll_loss", lambda rng: [rng.uniform(-3, -0.1, (4, 3)).astype("float32"),
                                           np.array([0, 3, -2, 1], dtype=np.int64)],
                  {"reduction": "none"}, id="nll-out-of-range-nan"))

"""The host's erf (and the GELU built on it): the vectorised rational approximations of
``devicelayer.kernels.special`` against the per-element ``np.vectorize(math.erf)`` they replace, measured in
alternation in the same run, with the largest relative difference from math.erf.

    python -m benchmarks.run --only erf --devices host
"""

from __future__ import annotations

import math

import numpy as np

from .common import interleaved

TITLE = "host erf (ms per call, median; speedup = np.vectorize(math.erf) / devicelayer)"
SIZES = (10_000, 1_200_000)


def _old_erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64)).astype(x.dtype)


def _timed(fn, x):
    import time

    def once() -> float:
        t0 = time.perf_counter()
        fn(x)
        return time.perf_counter() - t0
    return once


def run(devices, quick: bool = False) -> list[dict]:
    """One row per array size (float32, standard normal values, as GELU sees them)."""
    from devicelayer.kernels.special import erf

    rounds = 3 if quick else 9
    rows = []
    rng = np.random.default_rng(0)
    for n in SIZES:
        x = rng.standard_normal(n).astype(np.float32)
        new_s, old_s = interleaved(_timed(erf, x), _timed(_old_erf, x), rounds)
        wide = x.astype(np.float64)
        exact = np.array([math.erf(v) for v in wide[:20_000]])
        rel = np.max(np.abs(erf(wide[:20_000]) - exact) / np.maximum(np.abs(exact), 1e-300))
        rows.append({"name": f"erf float32 x{n}", "elements": n, "devicelayer_ms": new_s * 1e3,
                     "vectorize_ms": old_s * 1e3, "speedup": old_s / new_s, "max_rel_error_f64": float(rel)})
    return rows


if __name__ == "__main__":
    for row in run([]):
        print(row)

"""Cases for cast: every pair of kernel dtypes on every device (the host's storage-only dtypes: test_dtypes.py)."""

import numpy as np

from op_cases import Case

KERNEL = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32",
          "float64"]


def values(dtype, shape=(5, 31)):
    """Random values of ``dtype``: integers across (a part of) their range, floats in [-300, 300] with fractions
    (negative ones too: converting them to unsigned types wraps as NumPy does), bools of both values."""
    dt = np.dtype(dtype)

    def make(rng):
        if dt.kind == "b":
            return [rng.random(shape) < 0.5]
        if dt.kind in "iu":
            info = np.iinfo(dt)
            return [rng.integers(max(int(info.min), -1000), min(int(info.max), 1000), shape).astype(dt)]
        v = rng.uniform(-300, 300, shape)
        return [np.where(np.abs(v) < 0.5, 0.75, v).astype(dt)]
    return make


CASES = []
for src in KERNEL:
    for dst in KERNEL:
        if src != dst:
            exact = np.dtype(dst).kind in "biu" or np.dtype(src).kind in "biu" or np.dtype(src).itemsize <= \
                np.dtype(dst).itemsize
            CASES.append(Case("cast", values(src), {"to": dst}, id=f"{src}-{dst}", dtype=src, exact=exact,
                              rtol=1e-3 if dst == "float16" else None))
CASES.append(Case("cast", values("float32", (2, 1, 70001)), {"to": "int32"}, id="float32-int32-large", exact=True))

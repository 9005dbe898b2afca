"""Cases for rotary_embedding: 4-D and 3-D inputs, halves and interleaved pairs, partial rotation, caches read
through position_ids (int64, int32, one out of range) or per (batch, position), float16 and float64."""

import numpy as np

from op_cases import Case


def _rope(x_shape, heads=None, rd=None, pid=True, dtype="float32", pid_dtype="int64", positions=50, bad=False):
    def make(rng):
        if len(x_shape) == 4:
            B, _, S, D = x_shape
        else:
            B, S = x_shape[0], x_shape[1]
            D = x_shape[2] // heads
        half = (rd or D) // 2
        x = rng.uniform(-2, 2, x_shape).astype(dtype)
        cache_shape = (positions, half) if pid else (B, S, half)
        angles = rng.uniform(0, 6.3, cache_shape)
        arrays = [x, np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)]
        if pid:
            p = rng.integers(0, positions, (B, S)).astype(pid_dtype)
            if bad:
                p[0, 0] = positions + 3
            arrays.append(p)
        return arrays
    return make


R = "rotary_embedding"
CASES = []
for inter in (False, True):
    a = {"interleaved": inter} if inter else {}
    t = "-interleaved" if inter else ""
    CASES += [
        Case(R, _rope((2, 4, 3, 8)), a, id=f"rope-4d{t}"),
        Case(R, _rope((2, 3, 32), heads=4), {**a, "num_heads": 4}, id=f"rope-3d{t}"),
        Case(R, _rope((2, 4, 3, 8), rd=4), {**a, "rotary_embedding_dim": 4}, id=f"rope-partial{t}"),
        Case(R, _rope((2, 4, 3, 8), pid=False), a, id=f"rope-no-pid{t}"),
        Case(R, _rope((2, 5, 24), heads=3, rd=4, pid=False), {**a, "num_heads": 3, "rotary_embedding_dim": 4},
             id=f"rope-3d-no-pid-partial{t}"),
        Case(R, _rope((1, 2, 7, 16), pid_dtype="int32"), a, id=f"rope-int32-pid{t}"),
        Case(R, _rope((2, 8, 64, 64), positions=128), a, id=f"rope-large{t}"),
        Case(R, _rope((2, 4, 3, 8), dtype="float16"), a, id=f"rope-f16{t}", dtype="float16"),
        Case(R, _rope((2, 3, 32), heads=4, dtype="float64"), {**a, "num_heads": 4}, id=f"rope-f64{t}",
             dtype="float64"),
    ]
CASES.append(Case(R, _rope((2, 2, 3, 4), bad=True), {}, id="rope-position-out-of-range-nan"))

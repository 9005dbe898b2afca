"""Cases for gather_elements, gather_nd, scatter_elements, scatter_nd, tensor_scatter, reverse_sequence: random
valid indices (negative ones too), repeated indices with reductions, every element type moved as bits."""

import numpy as np

from op_cases import Case

DTYPES = ("float32", "int64", "bool", "float16", "int8", "uint16", "float64")


def _values(rng, shape, dtype):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(1, 100, shape).astype(dtype)
    return rng.uniform(-2, 2, shape).astype(dtype)


def _gather_elements(shape, ishape, axis, dtype="float32", itype="int64"):
    def make(rng):
        dim = shape[axis]
        return [_values(rng, shape, dtype), rng.integers(-dim, dim, ishape).astype(itype)]
    return make


def _scatter_elements(shape, ishape, axis, dtype="float32", itype="int64", unique=False):
    def make(rng):
        dim = shape[axis]
        if unique:  # distinct positions along the axis: a plain write has one answer
            idx = np.argsort(rng.random(ishape[:axis] + (dim,) + ishape[axis + 1:]), axis=axis)
            idx = np.take(idx, np.arange(ishape[axis]), axis=axis) - rng.integers(0, 2) * dim
        else:
            idx = rng.integers(-dim, dim, ishape)
        return [_values(rng, shape, dtype), idx.astype(itype), _values(rng, ishape, dtype)]
    return make


def _gather_nd(shape, ishape, batch_dims=0, dtype="float32", itype="int64"):
    def make(rng):
        m = ishape[-1]
        dims = np.array(shape[batch_dims:batch_dims + m])
        idx = rng.integers(-dims, dims, ishape[:-1] + (m,))
        return [_values(rng, shape, dtype), idx.astype(itype)]
    return make


def _scatter_nd(shape, lead, m, dtype="float32", unique=False):
    def make(rng):
        dims = np.array(shape[:m])
        if unique:
            flat = rng.choice(int(np.prod(dims)), int(np.prod(lead)), replace=False)
            idx = np.stack(np.unravel_index(flat, dims), -1).reshape(lead + (m,))
        else:
            idx = rng.integers(-dims, dims, lead + (m,))
        return [_values(rng, shape, dtype), idx.astype(np.int64), _values(rng, lead + shape[m:], dtype)]
    return make


CASES = []
for shape, ishape, axis in (((3, 4), (3, 4), 0), ((3, 4), (2, 6), 1), ((2, 3, 5), (2, 3, 7), -1),
                            ((4, 5, 6), (7, 2, 3), 0), ((2, 3, 4, 5, 6), (2, 2, 4, 3, 6), 3), ((5,), (9,), 0)):
    CASES.append(Case("gather_elements", _gather_elements(shape, ishape, axis), {"axis": axis},
                      id=f"gather_elements-{shape}-{ishape}-{axis}", exact=True))
for dtype in DTYPES:
    CASES.append(Case("gather_elements", _gather_elements((4, 6), (3, 6), 1, dtype, "int32"), {"axis": 1},
                      id=f"gather_elements-{dtype}", dtype=dtype, exact=True))
CASES.append(Case("gather_elements", _gather_elements((4, 6), (0, 6), 0), {"axis": 0}, id="gather_elements-empty"))

for reduction in ("none", "add", "mul", "max", "min"):
    for shape, ishape, axis in (((3, 4), (2, 4), 0), ((3, 5), (3, 7), 1), ((2, 3, 5), (2, 2, 9), -1),
                                ((6, 3, 2), (20, 3, 2), 0)):
        if reduction == "none" and ishape[axis] > shape[axis]:
            continue
        CASES.append(Case("scatter_elements", _scatter_elements(shape, ishape, axis, unique=reduction == "none"),
                          {"axis": axis, "reduction": reduction}, id=f"scatter_elements-{reduction}-{shape}-{ishape}"))
    for dtype in DTYPES:
        if reduction != "none" and dtype == "bool":
            continue
        CASES.append(Case("scatter_elements", _scatter_elements((5, 4), (3, 4), 0, dtype, "int32",
                                                                unique=reduction == "none"),
                          {"axis": 0, "reduction": reduction}, id=f"scatter_elements-{reduction}-{dtype}",
                          dtype=dtype))

for shape, ishape, b in (((2, 2), (2, 2), 0), ((2, 2), (2, 1), 0), ((2, 2, 2), (2, 2), 1), ((3, 4, 5), (6, 2), 0),
                         ((3, 4, 5, 2), (3, 7, 2), 1), ((2, 3, 4, 5), (2, 3, 2, 1), 2), ((4, 5), (2, 3, 2), 0)):
    CASES.append(Case("gather_nd", _gather_nd(shape, ishape, b), {"batch_dims": b},
                      id=f"gather_nd-{shape}-{ishape}-{b}", exact=True))
for dtype in DTYPES:
    CASES.append(Case("gather_nd", _gather_nd((3, 4, 5), (6, 2), 0, dtype, "int32"), {},
                      id=f"gather_nd-{dtype}", dtype=dtype, exact=True))

for reduction in ("none", "add", "mul", "max", "min"):
    for shape, lead, m in (((8,), (4,), 1), ((4, 4, 4), (2,), 1), ((4, 5, 3), (3, 2), 2), ((3, 4), (5,), 2),
                           ((6, 3), (12,), 1)):
        if reduction == "none" and np.prod(lead) > np.prod(shape[:m]):
            continue
        CASES.append(Case("scatter_nd", _scatter_nd(shape, lead, m, unique=reduction == "none"),
                          {"reduction": reduction}, id=f"scatter_nd-{reduction}-{shape}-{lead}-{m}"))
    for dtype in DTYPES:
        if reduction != "none" and dtype == "bool":
            continue
        CASES.append(Case("scatter_nd", _scatter_nd((5, 4), (3,), 1, dtype, unique=reduction == "none"),
                          {"reduction": reduction}, id=f"scatter_nd-{reduction}-{dtype}", dtype=dtype))


def _tensor_scatter(past, seq, axis, starts, dtype="float32", given=True):
    def make(rng):
        upd_shape = list(past)
        upd_shape[axis] = seq
        arrays = [_values(rng, past, dtype), _values(rng, tuple(upd_shape), dtype)]
        return arrays + ([np.array(starts, np.int64)] if given else [])
    return make


for mode in ("linear", "circular"):
    for past, seq, axis, starts in (((2, 3, 8, 4), 2, 2, [1, 6]), ((2, 3, 8, 4), 3, -2, [0, 5]),
                                    ((3, 10), 4, 1, [0, 2, 6]), ((2, 4, 6, 2, 3), 2, 2, [3, 4])):
        if mode == "circular":
            starts = [s + len(starts) * 3 for s in starts]  # wraps around
        CASES.append(Case("tensor_scatter", _tensor_scatter(past, seq, axis, starts), {"axis": axis, "mode": mode},
                          id=f"tensor_scatter-{mode}-{past}-{seq}-{axis}", exact=True))
CASES.append(Case("tensor_scatter", _tensor_scatter((2, 5, 3), 2, 1, None, given=False), {"axis": 1},
                  id="tensor_scatter-no-write-indices", exact=True))
for dtype in DTYPES:
    CASES.append(Case("tensor_scatter", _tensor_scatter((2, 6, 3), 2, 1, [4, 1], dtype), {"axis": 1},
                      id=f"tensor_scatter-{dtype}", dtype=dtype, exact=True))


def _reverse_sequence(shape, batch_axis, dtype="float32", itype="int64"):
    def make(rng):
        steps, batch = (shape[1], shape[0]) if batch_axis == 0 else (shape[0], shape[1])
        return [_values(rng, shape, dtype), rng.integers(0, steps + 1, batch).astype(itype)]
    return make


for shape, batch_axis in (((4, 4), 0), ((4, 4), 1), ((5, 3, 2), 1), ((3, 6, 2, 2), 0)):
    CASES.append(Case("reverse_sequence", _reverse_sequence(shape, batch_axis),
                      {"batch_axis": batch_axis, "time_axis": 1 - batch_axis},
                      id=f"reverse_sequence-{shape}-{batch_axis}", exact=True))
for dtype in DTYPES:
    CASES.append(Case("reverse_sequence", _reverse_sequence((6, 3), 1, dtype, "int32"), {},
                      id=f"reverse_sequence-{dtype}", dtype=dtype, exact=True))

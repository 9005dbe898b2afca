"""Cases for max_pool, max_pool_with_indices, average_pool, lp_pool, max_unpool, global_average_pool and
global_max_pool."""

import numpy as np

from op_cases import Case, inputs, rand

CASES = []


def pool(attrs, *shape, id, dtype="float32", ops=("max_pool", "average_pool"), low=-2.0, high=2.0, **extra):
    for op in ops:
        CASES.append(Case(op, inputs(rand(*shape, dtype=dtype, low=low, high=high)), {**attrs, **extra}, id=id,
                          dtype=dtype, rtol=1e-2 if dtype == "float16" else None))


pool({"kernel_shape": [3]}, 2, 3, 11, id="1d")
pool({"kernel_shape": [2], "strides": [2]}, 1, 2, 9, id="1d-stride")
pool({"kernel_shape": [3], "pads": [1, 2], "dilations": [2]}, 2, 2, 10, id="1d-pad-dil")
pool({"kernel_shape": [2, 2]}, 1, 1, 4, 4, id="2d")
pool({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, 2, 3, 9, 10, id="2d-s2-p1")
pool({"kernel_shape": [3, 2], "strides": [2, 3], "pads": [1, 0, 2, 1]}, 2, 2, 8, 9, id="2d-asym")
pool({"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, 1, 2, 8, 8, id="2d-ceil")
pool({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}, 1, 2, 8, 10,
     id="2d-ceil-pad")
pool({"kernel_shape": [2, 3], "dilations": [2, 2], "strides": [1, 2]}, 2, 2, 9, 11, id="2d-dil")
pool({"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}, 1, 2, 7, 8, id="same-upper")
pool({"kernel_shape": [4, 2], "auto_pad": "SAME_LOWER", "strides": [1, 3]}, 1, 2, 7, 8, id="same-lower")
pool({"kernel_shape": [3, 3], "auto_pad": "VALID", "strides": [2, 2]}, 1, 2, 9, 8, id="valid")
pool({"kernel_shape": [1, 2], "strides": [3, 3], "auto_pad": "SAME_UPPER"}, 1, 2, 6, 7, id="same-stride-gt-window")
pool({"kernel_shape": [2, 2], "strides": [3, 3], "auto_pad": "SAME_LOWER", "count_include_pad": 1}, 1, 2, 6, 7,
     id="same-lower-cip", ops=("average_pool",))
pool({"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "VALID", "ceil_mode": 1}, 1, 2, 8, 7, id="valid-ceil")
pool({"kernel_shape": [2, 2, 2]}, 1, 2, 4, 5, 6, id="3d")
pool({"kernel_shape": [3, 2, 3], "strides": [2, 1, 2], "pads": [1, 0, 1, 1, 1, 0]}, 2, 1, 5, 4, 7, id="3d-pad")
pool({"kernel_shape": [3, 3, 3], "strides": [2, 2, 2], "ceil_mode": 1, "dilations": [1, 2, 1]}, 1, 2, 6, 9, 7,
     id="3d-ceil-dil")
pool({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, 8, 64, 56, 56, id="large")
pool({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, 2, 3, 9, 10, id="f16", dtype="float16")
pool({"kernel_shape": [1, 1]}, 1, 3, 4, 4, id="k1")
pool({"kernel_shape": [3, 3], "strides": [1, 1]}, 2, 2, 3, 3, id="whole")
pool({"kernel_shape": [2, 2]}, 0, 3, 4, 4, id="empty-batch")
pool({"kernel_shape": [2, 2]}, 1, 1, 4, 4, id="storage-order", ops=("max_pool",), storage_order=1)
for extra_id, extra in (("cip", {"pads": [1, 2, 2, 1]}),
                        ("cip-ceil", {"ceil_mode": 1, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
                        ("cip-same", {"auto_pad": "SAME_LOWER", "strides": [2, 2]}),
                        ("cip-dil", {"dilations": [2, 1], "pads": [2, 1, 1, 2]})):
    pool({"kernel_shape": [3, 3], "count_include_pad": 1, **extra}, 2, 2, 7, 9, id=extra_id, ops=("average_pool",))

for op in ("global_average_pool", "global_max_pool"):
    for shape in [(1, 1, 1), (2, 3, 7), (2, 5, 4, 6), (1, 2, 3, 4, 5), (3, 4, 1, 1), (2, 2, 300, 301),
                  (64, 256, 7, 7), (0, 3, 2, 2)]:
        CASES.append(Case(op, inputs(rand(*shape)), id=f"{shape}"))
    CASES.append(Case(op, inputs(rand(2, 3, 9, 17, dtype="float16")), id="f16", dtype="float16"))

# int8 / uint8 max pools (opset 12): padding is the type's minimum
for dt in ("int8", "uint8"):
    pool({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}, 2, 3, 9, 10, id=f"{dt}", dtype=dt,
         ops=("max_pool",), low=-128 if dt == "int8" else 0, high=127 if dt == "int8" else 255)
    pool({"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]}, 1, 1, 5, 5, id=f"{dt}-whole", dtype=dt, ops=("max_pool",),
         low=-128 if dt == "int8" else 0, high=127 if dt == "int8" else 255)

# Lp pools: p = 1, 2 and others, with every window attribute
for p in (1, 2, 3, 4):
    pool({"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1], "p": p}, 2, 3, 9, 8, id=f"p{p}",
         ops=("lp_pool",))
pool({"kernel_shape": [3], "p": 3}, 2, 3, 11, id="1d-p3", ops=("lp_pool",))
pool({"kernel_shape": [2, 2], "dilations": [2, 2], "p": 2}, 1, 1, 4, 4, id="dilations", ops=("lp_pool",))
pool({"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER", "p": 4}, 1, 3, 8, 9, id="same-lower", ops=("lp_pool",))
pool({"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2], "p": 2}, 1, 3, 8, 9, id="same-upper",
     ops=("lp_pool",))
pool({"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "p": 3}, 1, 2, 8, 8, id="ceil", ops=("lp_pool",))
pool({"kernel_shape": [2, 2, 2], "p": 3}, 1, 2, 4, 5, 6, id="3d", ops=("lp_pool",))
pool({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "p": 2}, 2, 3, 9, 10, id="f16", dtype="float16",
     ops=("lp_pool",))
pool({"kernel_shape": [3, 3], "strides": [2, 2], "p": 2}, 4, 16, 40, 40, id="large", ops=("lp_pool",))

# the Indices output, both storage orders, 1-D to 3-D, padding, dilations, ceil_mode
for order in (0, 1):
    pool({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "storage_order": order}, 2, 3, 9, 10,
         id=f"2d-order{order}", ops=("max_pool_with_indices",))
    pool({"kernel_shape": [2, 3, 2], "strides": [1, 2, 2], "pads": [0, 1, 0, 1, 1, 1], "storage_order": order},
         1, 2, 4, 5, 6, id=f"3d-order{order}", ops=("max_pool_with_indices",))
pool({"kernel_shape": [3], "strides": [2], "pads": [1, 1]}, 2, 3, 11, id="1d", ops=("max_pool_with_indices",))
pool({"kernel_shape": [2, 3], "dilations": [2, 2], "ceil_mode": 1, "strides": [2, 2]}, 1, 2, 9, 11, id="dil-ceil",
     ops=("max_pool_with_indices",))
pool({"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]}, 1, 1, 5, 5, id="whole", ops=("max_pool_with_indices",))
pool({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, 1, 2, 6, 7, id="uint8", dtype="uint8", low=0, high=4,
     ops=("max_pool_with_indices",))  # many ties: the first maximum wins
pool({"kernel_shape": [3, 3], "strides": [2, 2]}, 1, 2, 9, 9, id="f16", dtype="float16",
     ops=("max_pool_with_indices",))


def _unpool_inputs(x_shape, kernel, strides, pads, dtype="float32"):
    """Values and the flat indices a max pool of this geometry could give (each inside its own window)."""
    def make(rng):
        nd = len(kernel)
        inferred = [(x_shape[2 + i] - 1) * strides[i] - pads[i] - pads[nd + i] + kernel[i] for i in range(nd)]
        values = rng.uniform(1, 5, x_shape).astype(dtype)
        coords = []
        for i in range(nd):
            start = np.arange(x_shape[2 + i]) * strides[i] - pads[i]
            pick = start.reshape([-1 if a == i else 1 for a in range(nd)]) + rng.integers(0, kernel[i], x_shape)
            coords.append(np.clip(pick, 0, inferred[i] - 1))
        flat = np.zeros(x_shape, np.int64)
        for i in range(nd):
            flat = flat * inferred[i] + coords[i]
        planes = np.arange(x_shape[0] * x_shape[1]).reshape(x_shape[:2] + (1,) * nd)
        flat = flat + planes * int(np.prod(inferred))
        # overlapping windows may pick one element twice; a max pool gives it the same value both times (which
        # of two writes to one place lands is unordered on a GPU)
        _, first = np.unique(flat.ravel(), return_inverse=True)
        shared = np.zeros(first.max() + 1, values.dtype)
        shared[first] = values.ravel()
        return [shared[first].reshape(x_shape), flat]
    return make


for x_shape, kernel, strides, pads, extra in [
        ((1, 1, 2, 2), [2, 2], [2, 2], [0, 0, 0, 0], {}),
        ((2, 3, 4, 5), [2, 2], [2, 2], [0, 0, 0, 0], {}),
        ((2, 3, 4, 5), [3, 2], [2, 2], [1, 0, 1, 0], {}),
        ((1, 2, 7), [3], [2], [1, 1], {}),
        ((1, 2, 3, 4, 3), [2, 2, 2], [2, 2, 2], [0] * 6, {}),
        ((1, 1, 2, 2), [2, 2], [2, 2], [0, 0, 0, 0], {"output_shape": [1, 1, 5, 5]}),
        ((2, 3, 4, 5), [2, 2], [2, 2], [0, 0, 0, 0], {"output_shape": [2, 3, 9, 11]})]:
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads, **extra}
    CASES.append(Case("max_unpool", _unpool_inputs(x_shape, kernel, strides, pads), attrs, id=f"{x_shape}-{attrs}"))
CASES.append(Case("max_unpool", _unpool_inputs((1, 2, 4, 4), [2, 2], [2, 2], [0] * 4, "int8"),
                  {"kernel_shape": [2, 2], "strides": [2, 2]}, id="int8", dtype="int8"))

"""Cases for the data movement ops: concat, split, slice, pad, transpose, reshape, flatten, squeeze,
unsqueeze, gather, depth_to_space, space_to_depth, channel_shuffle."""

import numpy as np

from op_cases import Case, inputs, rand

DTYPES = ["float32", "float16", "int32", "int64"]


def data(*shape, dtype="float32"):
    if np.dtype(dtype).kind in "iu":
        return rand(*shape, dtype=dtype, low=-1000, high=1000)
    return rand(*shape, dtype=dtype)


def idx(values, dtype="int64"):
    return lambda rng: np.asarray(values, dtype=dtype)


def rand_idx(shape, dim, dtype="int64"):
    return lambda rng: rng.integers(-dim, dim, shape).astype(dtype)


CASES = []


def case(op, makers, attrs=None, id="", dtype="float32"):
    CASES.append(Case(op, inputs(*makers), attrs or {}, id=id, dtype=dtype, exact=True))


for dt in DTYPES:
    case("concat", [data(2, 3, dtype=dt), data(2, 5, dtype=dt), data(2, 1, dtype=dt)], {"axis": 1}, f"axis1-{dt}", dt)
    case("split", [data(7, 4, dtype=dt)], {"axis": 0, "split": [2, 4, 1]}, f"sizes-{dt}", dt)
    case("slice", [data(5, 9, dtype=dt)], {"starts": [1, -2], "ends": [4, 0], "steps": [2, -3]}, f"neg-step-{dt}", dt)
    case("pad", [data(3, 4, dtype=dt)], {"pads": [1, 2, 0, 3], "value": 7}, f"const-{dt}", dt)
    case("pad", [data(3, 5, dtype=dt)], {"pads": [2, 1, 1, 4], "mode": "reflect"}, f"reflect-{dt}", dt)
    case("transpose", [data(3, 4, 5, dtype=dt)], {"perm": [1, 2, 0]}, f"perm-{dt}", dt)
    case("reshape", [data(2, 3, 4, dtype=dt)], {"shape": [0, -1]}, f"copy-dim-{dt}", dt)
    case("gather", [data(6, 5, dtype=dt), rand_idx((4,), 6)], {"axis": 0}, f"rows-{dt}", dt)
    case("depth_to_space", [data(1, 8, 2, 3, dtype=dt)], {"blocksize": 2}, f"dcr-{dt}", dt)
    case("space_to_depth", [data(2, 3, 4, 6, dtype=dt)], {"blocksize": 2}, f"bs2-{dt}", dt)
    case("channel_shuffle", [data(2, 6, 3, 5, dtype=dt)], {"group": 2}, f"g2-{dt}", dt)
    case("flatten", [data(2, 3, 4, dtype=dt)], {"axis": 2}, f"axis2-{dt}", dt)
    case("squeeze", [data(1, 3, 1, 2, dtype=dt)], {}, f"all-{dt}", dt)
    case("unsqueeze", [data(3, 2, dtype=dt)], {"axes": [0, -1]}, f"ends-{dt}", dt)

# concat
case("concat", [data(3, 4)], {"axis": 0}, "one-input")
case("concat", [data(2, 3, 4), data(2, 3, 4), data(2, 3, 4)], {"axis": -1}, "neg-axis")
case("concat", [data(1, 2, 3), data(4, 2, 3)], {"axis": 0}, "axis0")
case("concat", [data(2, 0, 3), data(2, 5, 3), data(2, 0, 3)], {"axis": 1}, "empty-parts")
case("concat", [data(7)] * 12, {"axis": 0}, "twelve")
case("concat", [data(3, 1, 70001), data(3, 2, 70001)], {"axis": 1}, "large")
case("concat", [data(2, 1, 2, 1, 2, 1, 3), data(2, 1, 2, 1, 2, 1, 2)], {"axis": 6}, "rank7")
# split
case("split", [data(10, 3)], {"num_outputs": 5}, "equal")
case("split", [data(3, 7)], {"axis": -1, "num_outputs": 3}, "uneven")
case("split", [data(2, 6, 5)], {"axis": 1, "split": [0, 6, 0]}, "empty-pieces")
case("split", [data(4, 5)], {"axis": 1, "split": [5]}, "one")
case("split", [data(2, 200001)], {"axis": 1, "num_outputs": 2}, "large")
# slice
case("slice", [data(10)], {"starts": [2], "ends": [8]}, "basic")
case("slice", [data(10)], {"starts": [-100], "ends": [100]}, "clamped")
case("slice", [data(10)], {"starts": [100], "ends": [-100], "steps": [-1]}, "reverse-clamped")
case("slice", [data(10)], {"starts": [-1], "ends": [-2**63], "steps": [-3]}, "int-min-end")
case("slice", [data(10)], {"starts": [5], "ends": [2]}, "empty")
case("slice", [data(4, 5, 6)], {"starts": [1, 0], "ends": [2**63 - 1, 3], "axes": [-1, 0]}, "axes")
case("slice", [data(3, 4, 5, 6)], {"starts": [0, 3, 4], "ends": [3, 0, 0], "axes": [0, 1, 3],
                                   "steps": [2, -1, -2]}, "mixed")
case("slice", [data(1, 2, 3, 2, 3, 2, 3)], {"starts": [1, 0], "ends": [3, 2], "axes": [2, 6]}, "rank7")
case("slice", [data(3, 100003)], {"starts": [1, 7], "ends": [3, 100000], "steps": [1, 3]}, "large")
# pad
case("pad", [data(5)], {"pads": [2, 3]}, "zero")
case("pad", [data(2, 3, 4)], {"pads": [0, 1, 2, 0, 3, 1], "value": -1.5}, "const-3d")
case("pad", [data(4, 6)], {"pads": [-1, 2, 1, -3]}, "crop-const")
case("pad", [data(4, 6)], {"pads": [-1, 2, 1, -3], "mode": "edge"}, "crop-edge")
case("pad", [data(4, 6)], {"pads": [1, -2, -1, 3], "mode": "reflect"}, "crop-reflect")
case("pad", [data(3, 5)], {"pads": [2, 7, 4, 1], "mode": "edge"}, "edge")
case("pad", [data(2, 3, 5)], {"pads": [0, 2, 4, 0, 3, 6], "mode": "wrap"}, "wrap")
case("pad", [data(4, 6)], {"pads": [1, -2, -1, 5], "mode": "wrap"}, "crop-wrap")
case("pad", [data(2, 3, 4)], {"pads": [1, 2], "axes": [-1]}, "axes")
case("pad", [data(1, 2, 3, 2, 3, 2, 3)], {"pads": [0, 0, 1, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 2]}, "rank7")
case("pad", [data(0, 3)], {"pads": [1, 0, 1, 2], "value": 4}, "empty-input")
case("pad", [data(3, 70001)], {"pads": [1, 5, 0, 2], "mode": "reflect"}, "large")
case("pad", [data(3, 4, dtype="int64")], {"pads": [1, 1, 1, 1], "value": -2**40}, "big-int64", "int64")
case("pad", [data(3, 4, dtype="int32")], {"pads": [0, 2, 0, 2], "mode": "wrap"}, "wrap-int32", "int32")
# transpose
case("transpose", [data(3, 5)], {}, "default")
case("transpose", [data(2, 3, 4, 5)], {}, "default-4d")
case("transpose", [data(1, 7, 1, 3)], {"perm": [3, 1, 0, 2]}, "size1")
case("transpose", [data(2, 3, 2, 3, 2, 3)], {"perm": [5, 3, 1, 4, 2, 0]}, "rank6")
case("transpose", [data(2, 1, 3, 1, 2, 1, 3, 2)], {"perm": [7, 6, 5, 4, 3, 2, 1, 0]}, "rank8-folds")
case("transpose", [data(0, 3)], {}, "empty")
case("transpose", [data(301, 1003)], {}, "large")
# views
case("reshape", [data(2, 3, 4)], {"shape": [4, -1]}, "infer")
case("reshape", [data(2, 3, 4)], {"shape": [24]}, "flat")
case("reshape", [data(2, 0, 4)], {"shape": [0, 4, 0], "allowzero": 1}, "allowzero")
case("reshape", [data(5)], {"shape": [1, 5, 1]}, "ones")
case("reshape", [data(3, 1000, 7)], {"shape": [-1, 7]}, "large")
case("flatten", [data(2, 3, 4)], {}, "default")
case("flatten", [data(2, 3, 4)], {"axis": 0}, "axis0")
case("flatten", [data(2, 3, 4)], {"axis": -1}, "neg")
case("flatten", [data(2, 3, 4)], {"axis": 3}, "axis-rank")
case("squeeze", [data(1, 3, 1, 2)], {"axes": [-2]}, "axes")
case("squeeze", [data(1)], {}, "to-scalar")
case("unsqueeze", [data(3, 2)], {"axes": [1, 3]}, "middle")
# gather
case("gather", [data(5, 4), idx([[0, -1], [2, 3]])], {"axis": 1}, "2d-idx")
case("gather", [data(2, 7, 3), idx([-7, 6, 0, 3], "int32")], {"axis": -2}, "int32-neg")
case("gather", [data(4, 3), idx(np.zeros(0, np.int64))], {}, "empty-idx")
case("gather", [data(50000, 16), rand_idx((3, 500), 50000)], {}, "embedding")
case("gather", [data(3, 5, dtype="int64"), rand_idx((6,), 5, "int32")], {"axis": 1}, "i64-data", "int64")
# depth_to_space / space_to_depth
case("depth_to_space", [data(2, 18, 3, 2)], {"blocksize": 3, "mode": "CRD"}, "crd")
case("depth_to_space", [data(2, 18, 3, 2)], {"blocksize": 3, "mode": "DCR"}, "dcr3")
case("depth_to_space", [data(1, 5, 2, 2)], {"blocksize": 1}, "bs1")
case("depth_to_space", [data(2, 64, 40, 33)], {"blocksize": 4}, "large")
case("space_to_depth", [data(1, 2, 6, 9)], {"blocksize": 3}, "bs3")
case("space_to_depth", [data(2, 16, 64, 64)], {"blocksize": 4}, "large")
case("space_to_depth", [data(2, 3, 6, 4)], {"blocksize": 2, "mode": "CRD"}, "crd")
case("space_to_depth", [data(1, 2, 6, 9, dtype="int64")], {"blocksize": 3, "mode": "CRD"}, "crd-i64", "int64")
# channel_shuffle
case("channel_shuffle", [data(1, 12, 7, 7)], {"group": 3}, "g3")
case("channel_shuffle", [data(1, 12, 7, 7)], {"group": 4}, "g4-asymmetric")
case("channel_shuffle", [data(2, 5, 3)], {"group": 1}, "g1-1d")
case("channel_shuffle", [data(1, 8, 2, 3, 2)], {"group": 8}, "g-all-3d")
case("channel_shuffle", [data(3, 10)], {"group": 5}, "2d")
case("channel_shuffle", [data(1, 240, 28, 28)], {"group": 3}, "shufflenet")
# bitcast: the same bytes as another dtype of the same width (integer sources: the float64 oracle widens floats)
case("bitcast", [data(3, 4, dtype="int32")], {"to": "float32"}, "i32-f32", "int32")
case("bitcast", [data(5, dtype="int64")], {"to": "float64"}, "i64-f64", "int64")
case("bitcast", [data(2, 3, dtype="uint16")], {"to": "int16"}, "u16-i16", "uint16")
case("bitcast", [data(7, dtype="int8")], {"to": "uint8"}, "i8-u8", "int8")

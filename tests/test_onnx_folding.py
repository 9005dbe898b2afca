"""The NumPy evaluators of shape arithmetic (``devicelayer/onnx/converters/folding.py``) give what ONNX's
reference evaluator gives, for the cases exported graphs hold and their edges (negative indices and axes,
clamped slices, truncating integer division, allowzero, empty ranges)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import helper  # noqa: E402

from devicelayer.graph.ir import Graph  # noqa: E402
from devicelayer.onnx.converters import FOLDERS  # noqa: E402
from devicelayer.onnx.loader import Context, _reference_eval  # noqa: E402


def i64(*v):
    return np.array(v, dtype=np.int64)


F = np.array([[1.5, -2.25, 3.0], [-0.5, 4.0, 7.5]], np.float32)
CASES = [
    ("Add", [i64(2, 3), i64(4)], {}, 13), ("Sub", [i64(7, 1), i64(3, 5)], {}, 13),
    ("Mul", [F, np.float32(2)], {}, 13), ("Div", [i64(7, -7, 6, -6), i64(2, 2, -4, -4)], {}, 13),
    ("Div", [F, np.float32(3)], {}, 13), ("Equal", [i64(1, 2, 3), i64(1, 0, 3)], {}, 13),
    ("Less", [F, np.float32(1)], {}, 13), ("GreaterOrEqual", [i64(1, 5), i64(5, 5)], {}, 13),
    ("Not", [np.array([True, False])], {}, 13), ("And", [np.array([True, False]), np.array(True)], {}, 13),
    ("Neg", [i64(3, -4)], {}, 13), ("Abs", [F], {}, 13), ("Floor", [F], {}, 13), ("Ceil", [F], {}, 13),
    ("Where", [np.array([True, False, True]), i64(1, 2, 3), i64(-1)], {}, 13),
    ("Max", [i64(1, 9), i64(4, 2), i64(3)], {}, 13), ("Min", [F, np.float32(0)], {}, 13),
    ("Cast", [i64(1, -2, 3)], {"to": onnx.TensorProto.FLOAT}, 13),
    ("Cast", [F], {"to": onnx.TensorProto.INT64}, 13), ("Cast", [i64(0, 3)], {"to": onnx.TensorProto.BOOL}, 13),
    ("Concat", [i64(1, 2), i64(3), i64(4, 5, 6)], {"axis": 0}, 13), ("Concat", [F, F], {"axis": -1}, 13),
    ("Unsqueeze", [i64(3, 4), i64(0, -1)], {}, 13), ("Unsqueeze", [np.array(7, np.int64)], {"axes": [0]}, 11),
    ("Squeeze", [F[None, :, None], i64(0, 2)], {}, 13), ("Squeeze", [F[None]], {}, 13),
    ("Gather", [i64(5, 6, 7), np.array(-1, np.int64)], {"axis": 0}, 13),
    ("Gather", [F, i64(1, 0, -1)], {"axis": 1}, 13),
    ("Slice", [i64(1, 2, 3, 4, 5), i64(1), i64(-1)], {}, 13),
    ("Slice", [F, i64(-1, 9 ** 18), i64(-1000, -(9 ** 18)), i64(0, 1), i64(-1, -2)], {}, 13),
    ("Slice", [i64(1, 2, 3, 4)], {"starts": [2], "ends": [100]}, 9),
    ("Reshape", [F, i64(0, 3)], {}, 13), ("Reshape", [F, i64(-1)], {}, 13),
    ("Reshape", [np.zeros((0, 3), np.float32), i64(3, 0)], {"allowzero": 1}, 14),
    ("Expand", [i64(1, 2, 3), i64(2, 1)], {}, 13), ("Range", [np.int64(2), np.int64(11), np.int64(3)], {}, 13),
    ("Range", [np.float32(1), np.float32(0), np.float32(0.5)], {}, 13),
    ("Range", [np.float32(0.5), np.float32(2.1), np.float32(0.4)], {}, 13),
    ("Transpose", [F], {"perm": [1, 0]}, 13), ("Tile", [F, i64(2, 1)], {}, 13),
    ("ReduceProd", [i64(2, 3, 4)], {"keepdims": 0}, 13), ("ReduceSum", [F, i64(1)], {"keepdims": 1}, 13),
    ("ReduceMax", [F, i64(-1)], {"keepdims": 0}, 18), ("ReduceMin", [F], {"axes": [0], "keepdims": 0}, 13),
]


@pytest.mark.parametrize("op,ins,attrs,opset", CASES, ids=[f"{c[0]}-{k}" for k, c in enumerate(CASES)])
def test_quick_folding_matches_onnxs_reference(op, ins, attrs, opset):
    ins = [np.asarray(x) for x in ins]
    node = helper.make_node(op, [f"in{i}" for i in range(len(ins))], ["out"], **attrs)
    ctx = Context(Graph(), opset, {"": opset})
    ctx.node = node
    from devicelayer.onnx.loader import attributes

    got = FOLDERS[op](ctx, attributes(node), ins)
    assert got is not None, "the quick evaluator declined a case it should cover"
    want = _reference_eval(node, ins, {"": opset}, 8)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def test_what_it_does_not_cover_is_left_to_the_reference_evaluator():
    ctx = Context(Graph(), 13, {"": 13})
    ctx.node = helper.make_node("Div", ["a", "b"], ["y"])
    assert FOLDERS["Div"](ctx, {}, [i64(4), i64(0)]) is None  # integer division by zero: undefined
    ctx.node = helper.make_node("Add", ["a", "b"], ["y"])
    assert FOLDERS["Add"](ctx, {}, [i64(4), np.float32(1)]) is None  # mixed dtypes: malformed

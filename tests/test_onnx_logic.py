"""The ONNX converters of comparisons, logic, bitwise ops, integer arithmetic, casts and unary elementwise ops,
on every device against onnxruntime (or ONNX's reference evaluator where onnxruntime lacks the op), and their
misuse: a typed devicelayer error naming the node or op, the device usable afterwards."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

import devicelayer.onnx as dlo  # noqa: E402
from devicelayer.kernels.runner import run  # noqa: E402
from devicelayer.tensors import tensor  # noqa: E402
from devicelayer.onnx.testing import make_model, onnxruntime_run  # noqa: E402

R = np.random.default_rng(20240)


def f32(*shape, lo=-3.0, hi=3.0, dtype=np.float32):
    return R.uniform(lo, hi, shape).astype(dtype)


def ints(*shape, dtype=np.int32, lo=-50, hi=50):
    return R.integers(lo, hi, shape).astype(dtype)


def bools(*shape):
    return R.random(shape) < 0.5


def node(op, ins, outs=("y",), **attrs):
    return helper.make_node(op, list(ins), list(outs), name=f"the_{op.lower()}", **attrs)


class Case:
    """One model: ``nodes`` over ``inputs``; compared with onnxruntime, or ONNX's reference evaluator (``ref``)."""

    def __init__(self, name, nodes, inputs, opset=18, tol=1e-5, ref=False, outputs=("y",)):
        self.name, self.nodes, self.inputs, self.opset, self.tol = name, nodes, inputs, opset, tol
        self.ref, self.outputs = ref, list(outputs)

    def model(self):
        return make_model(self.nodes if isinstance(self.nodes, list) else [self.nodes], self.inputs, self.outputs,
                          opset=self.opset)


def binary(op, a, b, opset=18, ref=False, **attrs):
    return Case(f"{op}_{a.dtype}{''.join(f'_{k}{v}' for k, v in attrs.items())}", node(op, ["a", "b"], **attrs),
                {"a": a, "b": b}, opset=opset, ref=ref)


def unary(op, x, opset=18, tol=1e-5, ref=False, **attrs):
    return Case(f"{op}_{x.dtype}{''.join(f'_{k}{v}' for k, v in attrs.items())}", node(op, ["x"], **attrs), {"x": x},
                opset=opset, tol=tol, ref=ref)


def cast(x, to, opset=19, **attrs):
    return Case(f"Cast_{x.dtype}_to_{TensorProto.DataType.Name(to)}", node("Cast", ["x"], to=to, **attrs), {"x": x},
                opset=opset)


WITH_NAN = np.array([[1.0, np.nan, -2.0, np.inf], [-np.inf, 0.5, np.nan, 3.0]], np.float32)

CASES = [
    *[binary(op, ints(2, 3, 4, lo=-3, hi=3), ints(3, 1, lo=-3, hi=3))
      for op in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual")],
    *[binary(op, f32(2, 3, 4).round(), f32(4).round()) for op in ("Equal", "Less", "GreaterOrEqual")],
    binary("Less", ints(3, 5, dtype=np.int8), ints(5, dtype=np.int8)),
    binary("Greater", ints(3, 5, dtype=np.uint64, lo=0), ints(1, dtype=np.uint64, lo=0)),
    Case("Equal_nan", node("Equal", ["a", "b"]), {"a": WITH_NAN, "b": WITH_NAN[::-1].copy()}),
    binary("Equal", bools(2, 3), bools(3), opset=19),
    *[binary(op, bools(2, 3, 4), bools(3, 1)) for op in ("And", "Or", "Xor")],
    unary("Not", bools(3, 4)),
    *[binary(op, ints(3, 4, dtype=np.int16, lo=-30000, hi=30000), ints(4, dtype=np.int16, lo=-30000, hi=30000))
      for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor")],
    binary("BitwiseAnd", ints(2, 4, dtype=np.uint8, lo=0, hi=256), ints(4, dtype=np.uint8, lo=0, hi=256)),
    unary("BitwiseNot", ints(3, 4, dtype=np.int32, lo=-2**31, hi=2**31 - 1)),
    binary("BitShift", ints(3, 4, dtype=np.uint32, lo=0, hi=2**31), ints(4, dtype=np.uint32, lo=0, hi=32),
           direction="LEFT"),
    binary("BitShift", ints(3, 4, dtype=np.uint8, lo=0, hi=256), ints(4, dtype=np.uint8, lo=0, hi=8),
           direction="RIGHT"),
    unary("IsNaN", WITH_NAN),
    unary("IsInf", WITH_NAN),
    unary("IsInf", WITH_NAN, detect_negative=0),
    unary("IsInf", WITH_NAN, detect_positive=0),
    binary("Mod", ints(3, 4, lo=-20, hi=20), np.array([3, -3, 7, -5], np.int32)),
    binary("Mod", ints(3, 4, dtype=np.int64, lo=-20, hi=20), np.array([3, -3, 7, -5], np.int64), fmod=1),
    binary("Mod", f32(3, 4), np.array([1.5, -1.5, 0.7, -2.0], np.float32), fmod=1),
    binary("Mod", ints(3, 4, dtype=np.uint16, lo=0, hi=60000), np.array([3, 300, 7, 5], np.uint16)),
    binary("Div", np.array([16777217, 2**31 - 1, -7, 7, -2**31 + 1], np.int32),
           np.array([1, 1, 2, -2, 1], np.int32)),
    binary("Div", ints(3, 4, dtype=np.int8, lo=-128, hi=127), np.array([3, -3, 7, -5], np.int8)),
    binary("Div", ints(3, 4, dtype=np.uint64, lo=0, hi=2**40), np.array([3, 300, 7, 5], np.uint64)),
    binary("Div", f32(3, 4, dtype=np.float64), f32(4, lo=0.5, hi=2, dtype=np.float64)),
    binary("Pow", ints(3, 4, lo=-4, hi=5), ints(4, lo=0, hi=7), opset=15),
    binary("Pow", ints(3, 4, dtype=np.int64, lo=1, hi=6), np.array([0.5, 1, 2, 3], np.float32), opset=15),
    binary("Pow", f32(3, 4, lo=0.5, hi=2), np.array([2, -1, 3, 0], np.int64), opset=15),
    *[binary(op, ints(3, 4, dtype=dt, lo=0, hi=100), ints(4, dtype=dt, lo=0, hi=100), ref=True)
      for op in ("Add", "Sub", "Mul", "Max", "Min") for dt in (np.uint8, np.int16)],
    Case("Sum_float64", node("Sum", ["a", "b", "c"]), {"a": f32(2, 3, dtype=np.float64), "b": f32(3, dtype=np.float64),
                                                       "c": f32(2, 1, dtype=np.float64)}),
    Case("Max_int8", node("Max", ["a", "b", "c"]), {"a": ints(2, 3, dtype=np.int8), "b": ints(3, dtype=np.int8),
                                                    "c": ints(2, 1, dtype=np.int8)}),
    Case("Mean_float64", node("Mean", ["a", "b"]), {"a": f32(2, 3, dtype=np.float64), "b": f32(3, dtype=np.float64)},
         ref=True),
    Case("Where_int8", node("Where", ["c", "a", "b"]), {"c": bools(2, 3), "a": ints(3, dtype=np.int8),
                                                        "b": ints(2, 1, dtype=np.int8)}),
    Case("Where_bool", node("Where", ["c", "a", "b"]), {"c": bools(2, 3), "a": bools(3), "b": bools(2, 1)},
         ref=True),
    Case("Clip_int8", node("Clip", ["x", "lo", "hi"]), {"x": ints(3, 5, dtype=np.int8, lo=-128, hi=127),
                                                        "lo": np.array(-20, np.int8), "hi": np.array(90, np.int8)},
         opset=13),
    *[unary(op, ints(3, 5, dtype=dt)) for op in ("Neg", "Abs", "Sign") for dt in (np.int8, np.int16, np.int64)],
    unary("Relu", ints(3, 5, dtype=np.int8)), unary("Abs", ints(3, 5, dtype=np.uint32, lo=0)),
    unary("Round", np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.3, -2.7, 3.5], np.float32)),
    *[unary(op, f32(3, 5)) for op in ("Tan", "Atan", "Sinh", "Cosh", "Asinh", "Sign", "Mish", "HardSwish", "Softplus",
                                      "Softsign")],
    *[unary(op, f32(3, 5, lo=-0.9, hi=0.9)) for op in ("Asin", "Acos", "Atanh")],
    unary("Acosh", f32(3, 5, lo=1.1, hi=5)),
    unary("Celu", f32(3, 5), alpha=1.5), unary("ThresholdedRelu", f32(3, 5), alpha=0.5),
    unary("Shrink", f32(3, 5), bias=0.5, lambd=1.0), unary("Shrink", ints(3, 5, dtype=np.int32), lambd=3.0, bias=1.0),
    unary("Swish", f32(3, 5), opset=24, ref=True, alpha=0.8),
    unary("Gelu", f32(3, 5), opset=20), unary("Erf", f32(3, 5)),
    unary("Relu", f32(3, 5, dtype=np.float64)), unary("Floor", f32(3, 5, dtype=np.float64)),
    unary("Exp", f32(3, 5, dtype=np.float64)), unary("Sqrt", f32(3, 5, lo=0.1, dtype=np.float64)),
    unary("HardSwish", f32(3, 5, dtype=np.float16), tol=2e-3),
    cast(f32(3, 5, lo=-300, hi=300), TensorProto.UINT8),
    cast(f32(3, 5, lo=-300, hi=300), TensorProto.INT8),
    cast(f32(3, 5, lo=-2, hi=2), TensorProto.BOOL),
    cast(ints(3, 5, dtype=np.int64, lo=-1000, hi=1000), TensorProto.INT8),
    cast(ints(3, 5, dtype=np.int8, lo=-128, hi=127), TensorProto.UINT32),
    cast(ints(3, 5, dtype=np.uint16, lo=0, hi=65535), TensorProto.INT16),
    cast(bools(3, 5), TensorProto.FLOAT),
    cast(f32(3, 5, lo=-1000, hi=1000, dtype=np.float64), TensorProto.FLOAT16),
    cast(f32(3, 5, lo=-1000, hi=1000, dtype=np.float16), TensorProto.INT32),
    cast(ints(3, 5, dtype=np.uint64, lo=0, hi=2**62), TensorProto.DOUBLE),
    cast(ints(3, 5, dtype=np.int32), TensorProto.BOOL),
    Case("CastLike_int16_to_float64", node("CastLike", ["x", "like"]),
         {"x": ints(3, 5, dtype=np.int16), "like": f32(1, dtype=np.float64)}, opset=19),
]
IDS = [c.name for c in CASES]
assert len(set(IDS)) == len(IDS), "duplicate case names"

_REFERENCE: dict[str, tuple] = {}


def _reference(case: Case):
    hit = _REFERENCE.get(case.name)
    if hit is None:
        model = case.model()
        if case.ref:
            from onnx.reference import ReferenceEvaluator

            got = ReferenceEvaluator(model).run(None, case.inputs)
            want = dict(zip(case.outputs, got))
        else:
            want = onnxruntime_run(model, case.inputs)
        hit = _REFERENCE[case.name] = (model, want)
    return hit


def _compile_or_skip(graph, device):
    """The graph compiled for ``device``; a skip where the device lacks a dtype (or GLSL a float64 function) the
    case needs."""
    try:
        return graph.compile([device.id])
    except dl.GraphError as exc:
        if "runs on none of the devices" in str(exc) and " has no " in str(exc):
            pytest.skip(str(exc))
        raise


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_op_matches_onnxruntime(case, device):
    model, want = _reference(case)
    plan = _compile_or_skip(dlo.load(model), device)
    try:
        got = plan(**case.inputs)
    finally:
        plan.release()
    for name in case.outputs:
        g, w = got[name], np.asarray(want[name])
        assert g.shape == w.shape and g.dtype == w.dtype, name
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=case.tol, atol=case.tol, err_msg=f"{case.name} {name}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{case.name} {name}")


@pytest.mark.parametrize("to", [TensorProto.FLOAT8E4M3FN, TensorProto.BFLOAT16, TensorProto.INT4])
def test_storage_only_casts_run_on_the_host_and_are_refused_elsewhere(device, to):
    x = np.array([0.3, -1.7, 1e6, np.nan, 5.0], np.float32)
    model = make_model([node("Cast", ["x"], to=to)], {"x": x}, ["y"], opset=21)
    graph = dlo.load(model)
    name = np.dtype(helper.tensor_dtype_to_np_dtype(to)).name
    if name in device.info.dtypes and device.info.kernel_language == "python":
        plan = graph.compile([device.id])
        try:
            got = plan(x=x)["y"]
        finally:
            plan.release()
        from onnx.reference import ReferenceEvaluator

        want = ReferenceEvaluator(model).run(None, {"x": x})[0]
        np.testing.assert_array_equal(got.view(np.uint8), np.asarray(want).view(np.uint8))
    else:
        with pytest.raises(dl.GraphError, match=f"the_cast.*{name}"):
            graph.compile([device.id])
    _still_usable(device)


def test_cast_of_opset_5_names_the_type(device):
    x = np.array([1.7, -2.5, 3.0, -0.2], np.float32)
    graph = helper.make_graph([node("Cast", ["x"], to="INT32")], "cast5",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 5)])
    model.ir_version = 3
    plan = dlo.load(model).compile([device.id])
    try:
        np.testing.assert_array_equal(plan(x=x)["y"], x.astype(np.int32))
    finally:
        plan.release()


# -- misuse -------------------------------------------------------------------------------------------------------
def _still_usable(device):
    a = np.array([1, -2, 3], np.int32)
    got = run("add", [tensor(a, device), tensor(a, device)])[0].numpy()
    np.testing.assert_array_equal(got, a + a)


def _unchecked_model(nodes, inputs, opset=24):
    """A model whose graph is typed only at its inputs (no shape inference: it would refuse the misuse)."""
    typed = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
             for n, a in inputs.items()]
    graph = helper.make_graph(nodes, "misuse", typed, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


MISUSE = [
    ("bitshift_direction", [node("BitShift", ["a", "b"], direction="UP")],
     {"a": ints(3, dtype=np.uint8, lo=0), "b": ints(3, dtype=np.uint8, lo=0, hi=3)}, "the_bitshift.*direction"),
    ("mod_fmod", [node("Mod", ["a", "b"], fmod=2)], {"a": ints(3), "b": ints(3, lo=1)}, "the_mod.*fmod"),
    ("and_of_floats", [node("And", ["a", "b"])], {"a": f32(3), "b": f32(3)}, "the_and.*bool"),
    ("bitwise_of_floats", [node("BitwiseOr", ["a", "b"])], {"a": f32(3), "b": f32(3)}, "the_bitwiseor.*integer"),
    ("less_mixed_dtypes", [node("Less", ["a", "b"])], {"a": f32(3), "b": ints(3)}, "the_less.*same dtype"),
    ("isnan_of_ints", [node("IsNaN", ["a"])], {"a": ints(3)}, "the_isnan.*floating"),
    ("not_of_ints", [node("Not", ["a"])], {"a": ints(3)}, "the_not.*bool"),
    ("round_of_ints", [node("Round", ["a"])], {"a": ints(3)}, "the_round.*floating"),
    ("cast_round_mode", [node("Cast", ["a"], to=TensorProto.FLOAT8E8M0, round_mode="sideways")], {"a": f32(3)},
     "the_cast.*round_mode"),
    ("pow_bool", [node("Pow", ["a", "b"])], {"a": bools(3), "b": bools(3)}, "the_pow.*bool"),
]


@pytest.mark.parametrize("name,nodes,inputs,match", MISUSE, ids=[m[0] for m in MISUSE])
def test_misuse_is_a_typed_error_naming_the_node(device, name, nodes, inputs, match):
    with pytest.raises((dl.GraphError, dl.UnsupportedOp, dl.InvalidArgument), match=match):
        graph = dlo.load(_unchecked_model(nodes, inputs))
        graph.compile([device.id])
    _still_usable(device)


def test_cast_to_string_is_refused():
    model = _unchecked_model([node("Cast", ["a"], to=TensorProto.STRING)], {"a": f32(3)})
    with pytest.raises(dl.UnsupportedOp, match="STRING"):
        dlo.load(model)


LIBRARY_MISUSE = [
    ("bit_shift", [np.ones(3, np.uint8)] * 2, {"direction": "UP"}, "direction"),
    ("bit_shift", [np.ones(3, np.float32)] * 2, {"direction": "LEFT"}, "integer"),
    ("mod", [np.ones(3, np.int32)] * 2, {"fmod": 3}, "fmod"),
    ("equal", [np.ones(3, np.int32), np.ones(3, np.int64)], {}, "same dtype"),
    ("pow", [np.ones(3, np.float32), np.ones(3, np.int32)], {}, "exponent"),
    ("cast", [np.ones(3, np.float32)], {"to": "float32", "saturate": 7}, "saturate"),
    ("cast", [np.ones(3, np.float32)], {"to": "not_a_dtype"}, "dtype"),
    ("is_inf", [np.ones(3, np.int32)], {}, "floating"),
    ("logical_not", [np.ones(3, np.float32)], {}, "bool"),
    ("bitwise_not", [np.ones(3, np.float32)], {}, "integer"),
]


@pytest.mark.parametrize("op,arrays,attrs,match", LIBRARY_MISUSE, ids=[f"{m[0]}-{m[3]}" for m in LIBRARY_MISUSE])
def test_library_misuse_names_the_op(device, op, arrays, attrs, match):
    with pytest.raises(dl.InvalidArgument, match=f"{op}.*{match}"):
        run(op, [tensor(a, device) for a in arrays], **attrs)
    _still_usable(device)

"""ONNX converters of the reductions, scans, selection, indexing and scatter ops against onnxruntime (and ONNX's
node suite) on every device, and their misuse."""

from __future__ import annotations

import dataclasses
import re
import warnings

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import devicelayer as dl
import devicelayer.onnx as dlo
from devicelayer.onnx.backend import backend_for
from devicelayer.onnx.testing import make_model, onnxruntime_run

# -- ONNX's node suite with the parameter inputs frozen ---------------------------------------------------------
#: op type -> inputs that are parameters (read with ``need_const``): the node suite feeds them as graph inputs,
#: which devicelayer takes once plans are specialised per parameter value
PARAMETERS = {**{op: (1,) for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                                     "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp", "TopK",
                                     "CumSum", "CumProd", "OneHot", "Trilu", "CenterCropPad", "Compress",
                                     "Reshape", "Unsqueeze", "Squeeze", "Expand", "Split", "Tile")},
              "Pad": (1, 2, 3), "Slice": (1, 2, 3, 4)}
#: the node-suite cases of this family whose parameters are graph inputs
FROZEN_PATTERN = (r"^test_(reduce|top_k|cumsum|cumprod|onehot|tril|triu|center_crop_pad|compress)")


def _parameter_inputs(graph) -> set[str]:
    """Names of the graph inputs some node reads as a parameter, directly or through other nodes (not through
    Shape, which reads only the static shape)."""
    producer = {out: n for n in graph.node for out in n.output}
    todo = [n.input[i] for n in graph.node for i in PARAMETERS.get(n.op_type, ()) if i < len(n.input)]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        node = producer.get(name)
        if node is not None and node.op_type != "Shape":
            todo.extend(node.input)
    return seen


def frozen_case(case):
    """``case`` with every graph input that some node reads as a parameter made an initializer of its value."""
    model = case.model.__class__.FromString(case.model.SerializeToString())
    g = model.graph
    params = _parameter_inputs(g)
    names = [vi.name for vi in g.input if vi.name not in {i.name for i in g.initializer}]
    frozen = [k for k, name in enumerate(names) if name in params]
    if not frozen:
        return case
    inputs0 = case.data_sets[0][0]
    for k in frozen:
        g.initializer.append(numpy_helper.from_array(np.asarray(inputs0[k]), names[k]))
    keep = [vi for vi in g.input if vi.name not in {names[k] for k in frozen}]
    del g.input[:]
    g.input.extend(keep)
    data_sets = [([x for k, x in enumerate(ins) if k not in frozen], refs) for ins, refs in case.data_sets]
    return dataclasses.replace(case, model=model, data_sets=data_sets)


def _frozen_cases():
    from devicelayer.onnx.conformance import node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return node_cases(FROZEN_PATTERN)


@pytest.mark.parametrize("case", _frozen_cases(), ids=lambda c: c.name)
def test_node_suite_case_with_parameters_frozen(case, device):
    """Each node-suite case of the family, its parameter inputs made initializers: passes, or is refused for a
    dtype the device lacks (or an op of another family)."""
    from devicelayer.onnx.conformance import PASS, UNSUPPORTED, run_case

    device_id = device.id
    outcome = run_case(frozen_case(case), device_id)
    if outcome.status == UNSUPPORTED or "runs on none of the devices" in outcome.detail:
        assert device_id != "host" or "BFLOAT16" in outcome.detail, outcome.detail
        pytest.skip(outcome.detail[:200])
    assert outcome.status == PASS, outcome.detail


# -- converters against onnxruntime -------------------------------------------------------------------------------
R = np.random.default_rng(4321)


def f32(*shape, lo=-2.0, hi=2.0):
    return R.uniform(lo, hi, shape).astype(np.float32)


def ints(*shape, lo=-5, hi=6, dtype=np.int64):
    return R.integers(lo, hi, shape).astype(dtype)


def i64(*v):
    return np.array(v, dtype=np.int64)


def node(op, ins, outs=("y",), **attrs):
    return helper.make_node(op, list(ins), list(outs), name=f"the_{op.lower()}", **attrs)


class Model:
    """One ONNX model: a node, graph inputs, initializers (the parameters), opset."""

    def __init__(self, name, nodes, inputs, outputs=("y",), inits=None, opset=18, tol=1e-5):
        self.name, self.nodes, self.inputs, self.outputs = name, nodes, inputs, list(outputs)
        self.inits, self.opset, self.tol = inits or {}, opset, tol

    def model(self):
        nodes = self.nodes if isinstance(self.nodes, list) else [self.nodes]
        return make_model(nodes, self.inputs, self.outputs, self.inits, self.opset)


X = f32(3, 4, 5)
TIES = ints(4, 6, lo=0, hi=3).astype(np.float32)
REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]

MODELS = []
for op in REDUCE_OPS:
    x = f32(3, 4, 5, lo=0.5, hi=1.5) if op == "ReduceLogSum" else X
    MODELS += [
        Model(f"{op}-axes-input", node(op, ["x", "ax"], keepdims=0), {"x": x}, inits={"ax": i64(0, -1)}),
        Model(f"{op}-all", node(op, ["x"]), {"x": x}),
        Model(f"{op}-noop", node(op, ["x", "ax"], noop_with_empty_axes=1), {"x": x}, inits={"ax": i64()}),
        Model(f"{op}-axes-attribute-op13", node(op, ["x"], axes=[1]), {"x": x}, opset=13 if op != "ReduceSum" else 11),
        Model(f"{op}-empty-set", node(op, ["x", "ax"]), {"x": f32(2, 0, 3)}, inits={"ax": i64(1)}),
    ]
for op in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceSumSquare", "ReduceMean"):
    for dtype in (np.int32, np.int64):
        MODELS.append(Model(f"{op}-{np.dtype(dtype).name}", node(op, ["x", "ax"], keepdims=0),
                            {"x": ints(4, 7, lo=-9, hi=10, dtype=dtype)}, inits={"ax": i64(1)}))
for op in ("ReduceMax", "ReduceMin"):
    MODELS.append(Model(f"{op}-bool", node(op, ["x", "ax"]), {"x": R.random((4, 5)) < 0.3}, inits={"ax": i64(1)},
                        opset=20))
for op in ("ArgMax", "ArgMin"):
    for last in (0, 1):
        MODELS += [
            Model(f"{op}-ties-last{last}", node(op, ["x"], axis=1, select_last_index=last), {"x": TIES}, opset=13),
            Model(f"{op}-long-last{last}", node(op, ["x"], axis=0, keepdims=0, select_last_index=last),
                  {"x": ints(300, 3, lo=0, hi=40).astype(np.float32)}, opset=13),
        ]
    MODELS.append(Model(f"{op}-int64-op11", node(op, ["x"], axis=-1), {"x": ints(3, 7)}, opset=11))
for largest in (0, 1):
    MODELS += [
        Model(f"TopK-ties-largest{largest}", node("TopK", ["x", "k"], ["v", "i"], largest=largest), {"x": TIES},
              outputs=("v", "i"), inits={"k": i64(4)}, opset=11),
        Model(f"TopK-long-largest{largest}", node("TopK", ["x", "k"], ["v", "i"], axis=0, largest=largest),
              {"x": f32(400, 2)}, outputs=("v", "i"), inits={"k": i64(9)}, opset=11),
    ]
MODELS += [
    Model("TopK-k-attribute-op1", node("TopK", ["x"], ["v", "i"], k=2), {"x": f32(3, 5)}, outputs=("v", "i"), opset=9),
    Model("TopK-int64", node("TopK", ["x", "k"], ["v", "i"]), {"x": ints(3, 8)}, outputs=("v", "i"),
          inits={"k": i64(3)}, opset=11),
    Model("Hardmax-op13", node("Hardmax", ["x"], axis=1), {"x": TIES.reshape(2, 12)}, opset=13),
    Model("Hardmax-3d-op13", node("Hardmax", ["x"]), {"x": f32(2, 3, 4)}, opset=13),
    Model("Hardmax-coerced-op11", node("Hardmax", ["x"], axis=1), {"x": f32(2, 3, 4)}, opset=11),
    Model("CumSum", node("CumSum", ["x", "a"]), {"x": f32(3, 6)}, inits={"a": np.array(1)}, opset=14),
    Model("CumSum-exclusive-reverse", node("CumSum", ["x", "a"], exclusive=1, reverse=1), {"x": f32(300, 2)},
          inits={"a": np.array(-2, np.int32)}, opset=14),
    Model("CumSum-int32", node("CumSum", ["x", "a"], exclusive=1), {"x": ints(5, 4, dtype=np.int32)},
          inits={"a": np.array(0)}, opset=14),
    Model("CumProd-reverse", node("CumProd", ["x", "a"], reverse=1), {"x": f32(3, 6, lo=0.5, hi=1.5)},
          inits={"a": np.array(1)}, opset=26),
    Model("GatherElements", node("GatherElements", ["x", "i"], axis=1), {"x": X, "i": ints(3, 6, 5, lo=-4, hi=4)}),
    Model("GatherElements-int32-const-indices", node("GatherElements", ["x", "i"], axis=0), {"x": X},
          inits={"i": ints(2, 4, 5, lo=-3, hi=3, dtype=np.int32)}),
    Model("GatherND", node("GatherND", ["x", "i"]), {"x": X, "i": ints(4, 2, lo=-3, hi=3)}),
    Model("GatherND-batch", node("GatherND", ["x", "i"], batch_dims=1), {"x": X, "i": ints(3, 6, 1, lo=-4, hi=4)}),
    Model("ScatterElements-add", node("ScatterElements", ["x", "i", "u"], axis=1, reduction="add"),
          {"x": X, "i": ints(3, 9, 5, lo=-4, hi=4), "u": f32(3, 9, 5)}),
    Model("ScatterElements-max", node("ScatterElements", ["x", "i", "u"], axis=0, reduction="max"),
          {"x": X, "i": ints(5, 4, 5, lo=-3, hi=3), "u": f32(5, 4, 5)}),
    Model("ScatterElements-none", node("ScatterElements", ["x", "i", "u"], axis=1),
          {"x": f32(3, 4), "i": np.tile(i64(3, 0, -2), (3, 1)), "u": f32(3, 3)}),
    Model("Scatter-op10", node("Scatter", ["x", "i", "u"], axis=0),
          {"x": f32(4, 3), "i": np.array([[1, 0, 3], [3, 2, 0]]), "u": f32(2, 3)}, opset=10),
    Model("ScatterND", node("ScatterND", ["x", "i", "u"]), {"x": X, "i": i64(2, -2, 0).reshape(3, 1), "u": f32(3, 4, 5)}),
    Model("ScatterND-mul", node("ScatterND", ["x", "i", "u"], reduction="mul"),
          {"x": X, "i": ints(7, 2, lo=-3, hi=3), "u": f32(7, 5)}),
    Model("ScatterND-min-int64", node("ScatterND", ["x", "i", "u"], reduction="min"),
          {"x": ints(4, 4), "i": ints(9, 2, lo=0, hi=4), "u": ints(9)}),
    Model("TensorScatter", node("TensorScatter", ["x", "u", "w"], axis=2),
          {"x": f32(2, 3, 8, 4), "u": f32(2, 3, 3, 4), "w": i64(0, 5)}, opset=24),
    Model("TensorScatter-circular", node("TensorScatter", ["x", "u", "w"], mode="circular"),
          {"x": f32(2, 3, 8, 4), "u": f32(2, 3, 3, 4), "w": i64(6, 9)}, opset=24),
    Model("ReverseSequence", node("ReverseSequence", ["x", "l"], batch_axis=0, time_axis=1),
          {"x": f32(4, 5, 2), "l": i64(1, 5, 3, 0)}),
    Model("OneHot", node("OneHot", ["i", "d", "v"], axis=1), {"i": ints(3, 4, lo=-6, hi=8), "v": f32(2)},
          inits={"d": np.array(5.0, np.float32)}),
    # whole-valued float indices (onnxruntime 1.30 matches only those; the spec's cast to int64 is tested below)
    Model("OneHot-float-indices", node("OneHot", ["i", "d", "v"]), {"i": np.array([-4, -1, 0, 2, 3, 5], np.float32)},
          inits={"d": np.array(4.0, np.float32), "v": np.array([0, 7], np.float32)}),
    Model("Trilu-upper", node("Trilu", ["x", "k"]), {"x": X}, inits={"k": i64(1)}, opset=14),
    Model("Trilu-lower-int64", node("Trilu", ["x"], upper=0), {"x": ints(2, 4, 3)}, opset=14),
    Model("EyeLike", node("EyeLike", ["x"], k=-1), {"x": f32(4, 6)}),
    Model("EyeLike-dtype", node("EyeLike", ["x"], k=2, dtype=helper.np_dtype_to_tensor_dtype(np.dtype("int32"))),
          {"x": f32(3, 5)}),
    Model("CenterCropPad", node("CenterCropPad", ["x", "s"], axes=[0, -1]), {"x": X}, inits={"s": i64(2, 8)}),
    Model("Compress-axis", node("Compress", ["x", "c"], axis=1), {"x": X}, inits={"c": np.array([1, 0, 1], bool)}),
    Model("Compress-flat", node("Compress", ["x", "c"]), {"x": f32(2, 3)},
          inits={"c": np.array([0, 1, 1, 0, 1], bool)}),
]

_REFERENCE: dict = {}


def _reference(case):
    hit = _REFERENCE.get(case.name)
    if hit is None:
        model = case.model()
        hit = _REFERENCE[case.name] = (model, onnxruntime_run(model, case.inputs))
    return hit


@pytest.mark.parametrize("case", MODELS, ids=[m.name for m in MODELS])
def test_model_matches_onnxruntime(case, device):
    model, want = _reference(case)
    try:
        got = backend_for(device.id).prepare(model).run(case.inputs)
    except dl.GraphError as exc:
        if "runs on none of the devices" in str(exc) and device.id != "host":
            pytest.skip(str(exc))
        raise
    for name, g in zip(case.outputs, got):
        w = want[name]
        assert g.shape == w.shape and g.dtype == w.dtype, name
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=case.tol, atol=case.tol, err_msg=f"{case.name} {name}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{case.name} {name}")


# -- converters the loader reaches only for run-time parameters, driven here with constant ones ---------------------
UNFOLDED_PATTERN = r"^test_(range|constantofshape|nonzero|unique|eyelike)_(?!.*(expanded|bfloat16))"


def _unfolded_cases():
    from devicelayer.onnx.conformance import node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return node_cases(UNFOLDED_PATTERN)


def run_converter(onnx_node, values, opset, device_id):
    """The outputs of ``onnx_node``'s converter given constant inputs ``values`` (which the loader would fold
    instead), run as a graph on ``device_id``."""
    from devicelayer.graph.ir import Graph
    from devicelayer.onnx.converters import CONVERTERS
    from devicelayer.onnx.loader import Context, attributes

    g = Graph("unfolded")
    ctx = Context(g, opset, {"": opset})
    ctx.env = dict(zip(onnx_node.input, values))
    ctx.node, ctx.node_name = onnx_node, onnx_node.name or onnx_node.op_type
    outs = CONVERTERS[onnx_node.op_type](ctx, attributes(onnx_node))
    for name, out in zip(onnx_node.output, outs):
        g.output(name, ctx.as_value(out))
    plan = g.compile([device_id])
    try:
        got = plan()
    finally:
        plan.release()
    return [got[name] for name in onnx_node.output]


@pytest.mark.parametrize("case", _unfolded_cases(), ids=lambda c: c.name)
def test_converter_of_folded_op_matches_node_suite(case, device):
    from onnx.backend.test.runner import Runner

    (onnx_node,) = case.model.graph.node
    opset = next(i.version for i in case.model.opset_import if i.domain in ("", "ai.onnx"))
    for inputs, refs in case.data_sets:
        try:
            got = run_converter(onnx_node, [np.asarray(x) for x in inputs], opset, device.id)
        except dl.GraphError as exc:
            if "runs on none of the devices" in str(exc) and device.id != "host":
                pytest.skip(str(exc))
            raise
        Runner.assert_similar_outputs([np.asarray(r) for r in refs], got, case.rtol, case.atol)


def test_compress_on_the_host_matches_node_suite():
    """What Compress computes on the host when its condition is a run-time value."""
    from devicelayer.onnx.conformance import node_cases
    from devicelayer.onnx.converters.indexing import compress

    for case in node_cases(r"^test_compress_(?!bfloat16)"):
        (n,) = case.model.graph.node
        axis = next((a.i for a in n.attribute if a.name == "axis"), None)
        for (x, condition), (want,) in case.data_sets:
            axis_ = None if axis is None else axis % np.asarray(x).ndim
            np.testing.assert_array_equal(compress(np.asarray(x), np.asarray(condition), axis_), want)
    with pytest.raises(dl.InvalidArgument, match="Compress: the condition keeps position 3"):
        compress(np.ones((2, 3)), np.array([0, 1, 0, 1], bool), 1)


def test_unique_and_nonzero_on_the_host_match_numpy_conventions():
    from devicelayer.onnx.converters.indexing import nonzero, unique

    x = np.array([[1, 0, 3], [0, 2, 1]])
    assert nonzero(x).tolist() == [[0, 0, 1, 1], [0, 2, 1, 2]]
    assert nonzero(np.array(5)).shape == (0, 1) and nonzero(np.zeros((2, 0))).shape == (2, 0)
    y, first, inverse, counts = unique(np.array([2, 1, 1, 3, 4, 3]), None, False)
    assert y.tolist() == [2, 1, 3, 4] and first.tolist() == [0, 1, 3, 4]
    assert inverse.tolist() == [0, 1, 1, 2, 3, 2] and counts.tolist() == [1, 2, 2, 1]


# -- misuse ---------------------------------------------------------------------------------------------------------
def _bad(index_dtype):
    """(op, inputs, attrs, message) cases whose indices are out of range."""
    it = np.dtype(index_dtype).type
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    return [
        ("gather", [x, np.array([1, 3], it)], {"axis": 0}, "index 3 is out of range [-3, 3) of axis 0"),
        ("gather", [x, np.array([-5, 0], it)], {"axis": 1}, "index -5 is out of range [-4, 4) of axis 1"),
        ("gather_elements", [x, np.array([[0, 4], [1, 1]], it)], {"axis": 1}, "index 4 is out of range"),
        ("gather_nd", [x, np.array([[0, 1], [3, 0]], it)], {}, "index 3 is out of range of data dims (3, 4)"),
        ("scatter_elements", [x, np.array([[0], [-4]], it), np.ones((2, 1), np.float32)], {"axis": 0},
         "index -4 is out of range [-3, 3) of axis 0"),
        ("scatter_elements", [x, np.array([[0, 9]], it), np.ones((1, 2), np.float32)],
         {"axis": 1, "reduction": "add"}, "index 9"),
        ("scatter_nd", [x, np.array([[1, 4]], it), np.ones(1, np.float32)], {}, "index 4"),
        ("scatter_nd", [x, np.array([[7]], it), np.ones((1, 4), np.float32)], {"reduction": "max"}, "index 7"),
        ("reverse_sequence", [x, np.array([2, 5, 0, 1], it)], {"batch_axis": 1, "time_axis": 0},
         "sequence length 5 is out of range [0, 3]"),
        ("tensor_scatter", [x, np.ones((3, 2), np.float32), np.array([0, 3, 1], it)], {"axis": 1},
         "write position 4 is out of range [0, 4)"),
    ]


BAD = [(dt, *case) for dt in ("int64", "int32") for case in _bad(dt)]


@pytest.mark.parametrize("index_dtype,name,arrays,attrs,match", BAD,
                         ids=[f"{b[1]}-{b[0]}-{k}" for k, b in enumerate(BAD)])
def test_bad_index_is_an_invalid_argument_on_every_device(device, index_dtype, name, arrays, attrs, match):
    from devicelayer.kernels.runner import run
    from devicelayer.tensors import tensor

    ins = [tensor(a, device).reshape(a.shape) for a in arrays]
    with pytest.raises(dl.InvalidArgument, match=f"^{name}: .*{re.escape(match)}"):
        run(name, ins, **attrs)
    good = [np.zeros_like(a) if a.dtype.kind in "iu" else a for a in arrays]
    got = run(name, [tensor(a, device).reshape(a.shape) for a in good], **attrs)  # the device still works
    from devicelayer.kernels.op import OPS, TensorType

    op = OPS[name]
    checked, _ = op.prepare([TensorType(a.shape, a.dtype) for a in good], dict(attrs))
    for g, w in zip(got, op.reference(good, checked)):
        np.testing.assert_array_equal(g.numpy(), w)


def test_one_hot_casts_float_indices_to_int64_as_the_spec_says(device):
    """ONNX: non-integer indices "will be casted to int64 before use" (toward zero), then counted from the end
    where negative; out of [-depth, depth - 1] the row is all off."""
    i = np.array([-0.7, 2.9, 3.5, -3.2, -4.5, 4.2, -5.1, 1.0], np.float32)
    m = make_model([node("OneHot", ["i", "d", "v"])], {"i": i}, ["y"],
                   {"d": np.array(4.0, np.float32), "v": np.array([0, 7], np.float32)})
    want = np.zeros((8, 4), np.float32)
    for row, k in enumerate(i.astype(np.int64)):
        if -4 <= k < 4:
            want[row, k % 4] = 7
    np.testing.assert_array_equal(dlo.load(m).compile([device.id])(i=i)["y"], want)


def test_huge_int64_index_is_reported_whole(device):
    from devicelayer.kernels.runner import run
    from devicelayer.tensors import tensor

    x = tensor(np.ones((4, 2), np.float32), device)
    idx = tensor(np.array([1, 2**40 + 1], np.int64), device)  # as int32 it would be 1, a valid index
    with pytest.raises(dl.InvalidArgument, match="gather: index 1099511627777 is out of range"):
        run("gather", [x, idx])


@pytest.mark.parametrize("op,axis,index", [("GatherElements", 1, [[0, 5]] * 3), ("Gather", 0, [[1, -4]])])
def test_bad_index_in_a_model_is_refused_alike_on_every_device(device, op, axis, index):
    """Every device answers an index out of range with InvalidArgument naming the node and the index (kernels
    flag it; nothing is clamped), and runs the model again afterwards."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    good = np.zeros(np.array(index).shape, np.int64)
    m = make_model([node(op, ["x", "i"], axis=axis)], {"x": x, "i": good}, ["y"])
    plan = dlo.load(m).compile([device.id])
    want = np.take_along_axis(x, good, axis) if op == "GatherElements" else np.take(x, good, axis)
    for _ in range(2):  # the second run replays through the plan's lane, which checks the flags too
        np.testing.assert_array_equal(plan(x=x, i=good)["y"], want)
    with pytest.raises(dl.InvalidArgument, match=rf"node 'the_{op.lower()}'.*index -?[45] is out of range"):
        plan(x=x, i=np.array(index, np.int64))
    np.testing.assert_array_equal(plan(x=x, i=good)["y"], want)


def test_the_first_of_two_flagged_nodes_is_named(device):
    """Two gathers each read an index input; a run where only the second is out of range names that one, a run
    where both are names the first in the graph's order, and a good run after passes (every flag is read back
    each run, and zeroed by the next)."""
    x = np.random.default_rng(5).standard_normal((4, 3)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["x", "i"], ["a"], name="first", axis=0),
             helper.make_node("Gather", ["a", "j"], ["y"], name="second", axis=1)]
    good = {"x": x, "i": np.array([3, 0], np.int64), "j": np.array([2, 1], np.int64)}
    plan = dlo.load(make_model(nodes, good, ["y"])).compile([device.id])
    want = x[[3, 0]][:, [2, 1]]
    for _ in range(2):
        np.testing.assert_array_equal(plan(**good)["y"], want)
    with pytest.raises(dl.InvalidArgument, match=r"node 'second'.*index 3 is out of range"):
        plan(**{**good, "j": np.array([3, 1], np.int64)})
    with pytest.raises(dl.InvalidArgument, match=r"node 'first'.*index 4 is out of range"):
        plan(**{**good, "i": np.array([4, 0], np.int64), "j": np.array([3, 1], np.int64)})
    np.testing.assert_array_equal(plan(**good)["y"], want)


def _unchecked_model(nodes, inputs, inits=None, opset=18):
    """A model without ONNX's shape inference (which would refuse some misuse before devicelayer sees it)."""
    vi = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs.items()]
    graph = helper.make_graph(nodes, "misuse", vi, [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["n"])],
                              [numpy_helper.from_array(a, n) for n, a in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


X34 = np.arange(12, dtype=np.float32).reshape(3, 4)
CONVERTER_MISUSE = [
    ("reduction", dl.GraphError, [node("ScatterElements", ["x", "i", "u"], reduction="avg")],
     {"x": X34, "i": np.zeros((1, 4), np.int64), "u": np.ones((1, 4), np.float32)}, {}),
    ("k .* must lie in", dl.GraphError, [node("TopK", ["x", "k"], ["y", "j"])], {"x": X34}, {"k": i64(9)}),
    ("indices must be int32 or int64", dl.GraphError, [node("GatherND", ["x", "i"])],
     {"x": X34, "i": np.zeros((2, 1), np.float32)}, {}),
    ("batch_axis and time_axis", dl.GraphError, [node("ReverseSequence", ["x", "l"], batch_axis=1, time_axis=1)],
     {"x": X34, "l": i64(1, 2, 3, 1)}, {}),
    ("depth must be >= 1", dl.GraphError, [node("OneHot", ["i", "d", "v"])],
     {"i": i64(0, 1), "v": np.array([0, 1], np.float32)}, {"d": i64(0)}),
    ("reduce_l2 of int32", dl.UnsupportedOp, [node("ReduceL2", ["x"])], {"x": np.ones((2, 2), np.int32)}, {}),
    ("axis 0 is the batch", dl.GraphError, [node("TensorScatter", ["x", "u"], axis=0)],
     {"x": X34, "u": X34[:1].copy()}, {}),
    ("empty", dl.GraphError, [node("ArgMax", ["x"], axis=1)], {"x": np.ones((2, 0), np.float32)}, {}),
]


@pytest.mark.parametrize("match,error,nodes,inputs,inits", CONVERTER_MISUSE,
                         ids=[m[2][0].op_type + "-" + m[0] for m in CONVERTER_MISUSE])
def test_converter_misuse_names_the_node(device, match, error, nodes, inputs, inits):
    model = _unchecked_model(nodes, inputs, inits, opset=24 if nodes[0].op_type == "TensorScatter" else 18)
    with pytest.raises(error, match=f"{nodes[0].name}.*{match}"):
        backend_for(device.id).prepare(model).run(list(inputs.values()))
    good = make_model([node("ArgMax", ["x"], axis=1)], {"x": X34}, ["y"])  # the device still works
    assert backend_for(device.id).prepare(good).run([X34])[0].tolist() == [[3], [3], [3]]

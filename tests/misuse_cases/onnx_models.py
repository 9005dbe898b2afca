"""Misuse of the ONNX front end: files and bytes that are not models, unsupported content, bad options."""

from __future__ import annotations

import numpy as np
import pytest

from devicelayer import GraphError, InvalidArgument, UnsupportedOp

from .catalogue import misuse, misuses

A = "onnx"
X = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)


def relu_model(op: str = "Relu", name: str = "the_node", **attrs) -> object:
    """x (2, 3) float32 -> one node ``op`` -> y, as a checked ModelProto."""
    from onnx import helper

    from devicelayer.onnx.testing import make_model

    return make_model([helper.make_node(op, ["x"], ["y"], name=name, **attrs)], {"x": X}, ["y"])


def lacking_op_model(name: str = "my_decoder") -> object:
    """x (2, 3) float32 -> ImageDecoder (an op devicelayer does not run: it decodes image files) -> y."""
    from onnx import TensorProto, checker, helper

    node = helper.make_node("ImageDecoder", ["x"], ["y"], name=name)
    graph = helper.make_graph([node], "lacking", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    checker.check_model(model)
    return model


def add_model() -> object:
    """x (2, 3) float32 + the initializer w (2, 3) (raw_data) -> y, as a checked ModelProto."""
    from onnx import helper

    from devicelayer.onnx.testing import make_model

    return make_model([helper.make_node("Add", ["x", "w"], ["y"], name="the_add")], {"x": X}, ["y"], {"w": X})


def _weights(edit) -> object:
    """``add_model()`` with its initializer changed by ``edit(w)``."""
    model = add_model()
    edit(model.graph.initializer[0])
    return model


def _typed(w) -> None:
    """w's six values in float_data instead of raw_data, the last one dropped."""
    from onnx import helper

    w.CopyFrom(helper.make_tensor("w", w.data_type, list(w.dims), X.ravel().tolist()))
    del w.float_data[5]


def _external(w) -> None:
    from onnx import TensorProto

    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    entry = w.external_data.add()
    entry.key, entry.value = "location", "weights.bin"


def _constant_cut(model) -> None:
    """The initializer becomes a Constant node whose value tensor is cut short."""
    from onnx import helper

    w = model.graph.initializer.pop()
    w.raw_data = w.raw_data[:7]
    model.graph.node.insert(0, helper.make_node("Constant", [], ["w"], name="the_constant", value=w))


def _produced_twice(model) -> None:
    from onnx import helper

    model.graph.node.append(helper.make_node("Relu", ["x"], ["y"], name="second"))


def _reads_nothing(model) -> None:
    model.graph.node[0].input[1] = "nothing"


def _negative_input_dim(model) -> None:
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = -2


def _subgraph_cut(model) -> None:
    """The Add moves into both branches of an If on a constant condition; the then branch's w is cut short."""
    from onnx import TensorProto, helper, numpy_helper

    add = model.graph.node.pop()
    w = model.graph.initializer.pop()
    branches = []
    for name in ("then", "else"):
        weight = numpy_helper.from_array(X, f"w_{name}")
        if name == "then":
            weight.raw_data = weight.raw_data[:9]
        node = helper.make_node("Add", ["x", weight.name], [f"y_{name}"], name=f"add_{name}")
        branches.append(helper.make_graph([node], name, [], [helper.make_tensor_value_info(
            f"y_{name}", TensorProto.FLOAT, [2, 3])], [weight]))
    cond = numpy_helper.from_array(np.array(True), "cond")
    model.graph.initializer.append(cond)
    model.graph.node.append(helper.make_node("If", ["cond"], [add.output[0]], name="the_if",
                                             then_branch=branches[0], else_branch=branches[1]))
    del w


def _saved(s, model, name: str) -> str:
    """``model`` written to a file of the case's folder; its path."""
    import onnx

    path = s.path(name)
    onnx.save(model, str(path))
    return str(path)


def _with(model, edit) -> object:
    """``model`` after ``edit(model)`` (which changes it in place)."""
    edit(model)
    return model


def _cycle(model) -> None:
    from onnx import helper

    model.graph.node.extend([helper.make_node("Relu", ["b"], ["a"], name="n1"),
                             helper.make_node("Relu", ["a"], ["b"], name="n2")])


def _string_input(model) -> None:
    from onnx import TensorProto

    model.graph.input[0].type.tensor_type.elem_type = TensorProto.STRING


def _custom_domain(model) -> None:
    from onnx import helper

    model.graph.node[0].domain = "com.acme"
    model.opset_import.append(helper.make_opsetid("com.acme", 1))


def _no_perm(model) -> None:
    """Transpose's perm becomes [0, 0], which the checker lets pass and the op refuses."""
    model.graph.node[0].attribute[0].ints[:] = [0, 0]


class _Onnx:
    """The ONNX front end and a valid one-Relu model, as a ModelProto and as bytes."""

    def __init__(self, s) -> None:
        pytest.importorskip("onnx")
        import devicelayer.onnx as dlo

        self.load, self.bundled = dlo.load, dlo.bundled
        self.model = relu_model()
        self.bytes = self.model.SerializeToString()
        self.dynamic = _with(relu_model(), lambda m: m.graph.input[0].type.tensor_type.shape.dim[0].Clear())


misuses(A, _Onnx, [
    ("onnx-not-a-model", "load bytes that are not a protobuf", GraphError, "not an ONNX model",
     lambda s, o: o.load(b"\xff\xfe this is not a model")),
    ("onnx-truncated", "load the first half of a model's bytes", GraphError, "not an ONNX model",
     lambda s, o: o.load(o.bytes[: len(o.bytes) // 2])),
    ("onnx-empty-bytes", "load empty bytes", GraphError, "fails the checker", lambda s, o: o.load(b"")),
    ("onnx-missing-file", "load a file that does not exist", GraphError, "no ONNX model file",
     lambda s, o: o.load(s.path("missing.onnx"))),
    ("onnx-source-wrong-type", "load the number 12345", InvalidArgument, "expected a path, bytes or",
     lambda s, o: o.load(12345)),
    ("onnx-unsupported-op", "load a model with an ImageDecoder node", UnsupportedOp, "node 'my_decoder' (ImageDecoder)",
     lambda s, o: o.load(lacking_op_model())),
    ("onnx-opset-too-new", "load a model importing opset 1000", UnsupportedOp, "opset 1000",
     lambda s, o: o.load(_with(o.model, lambda m: setattr(m.opset_import[0], "version", 1000)))),
    ("onnx-custom-domain", "load a model with an op of domain com.acme", UnsupportedOp, "op domain 'com.acme'",
     lambda s, o: o.load(_with(o.model, _custom_domain))),
    ("onnx-cycle", "load a model whose nodes read each other", GraphError, "topologically sorted",
     lambda s, o: o.load(_with(o.model, _cycle))),
    ("onnx-string-input", "load a model with a string input", UnsupportedOp, "STRING",
     lambda s, o: o.load(_with(o.model, _string_input))),
    ("onnx-invalid-attribute", "load a Transpose whose perm is not a permutation", GraphError,
     "node 'the_node' (Transpose)", lambda s, o: o.load(_with(relu_model("Transpose", perm=[1, 0]), _no_perm))),
    ("onnx-input-shapes-not-a-mapping", "load with input_shapes as a list", InvalidArgument,
     "input_shapes must map", lambda s, o: o.load(o.dynamic, input_shapes=[(2, 3)])),
    ("onnx-input-shapes-wrong-rank", "load with an input shape of rank 3", InvalidArgument, "has rank 3",
     lambda s, o: o.load(o.dynamic, input_shapes={"x": (1, 2, 3)})),
    ("onnx-input-shapes-unknown-name", "load with a shape for input 'nope'", InvalidArgument, "not graph inputs",
     lambda s, o: o.load(o.dynamic, input_shapes={"nope": (2, 3)})),
    ("onnx-input-shapes-not-ints", "load with input shape ('a', 3)", InvalidArgument, "sequence of ints",
     lambda s, o: o.load(o.dynamic, input_shapes={"x": ("a", 3)})),
    ("onnx-bundled-unknown", "ask for bundled model 'nosuch'", InvalidArgument, "no bundled model 'nosuch'",
     lambda s, o: o.bundled("nosuch")),
    ("onnx-initializer-raw-data-short", "load a model whose initializer's raw_data is cut to 10 bytes", GraphError,
     "initializer 'w': raw_data holds 10 bytes; FLOAT (2, 3) needs 24",
     lambda s, o: o.load(_weights(lambda w: setattr(w, "raw_data", w.raw_data[:10])))),
    ("onnx-initializer-raw-data-long", "load a model whose initializer's raw_data has 4 bytes too many", GraphError,
     "initializer 'w': raw_data holds 28 bytes", lambda s, o: o.load(_weights(lambda w: setattr(
         w, "raw_data", w.raw_data + b"1234")))),
    ("onnx-initializer-values-short", "load a model whose initializer has 5 float_data values for 6", GraphError,
     "initializer 'w': float_data holds 5 values; FLOAT (2, 3) needs 6", lambda s, o: o.load(_weights(_typed))),
    ("onnx-initializer-dims-disagree", "load a model whose initializer's dims say (2, 4) for 6 values", GraphError,
     "initializer 'w': raw_data holds 24 bytes; FLOAT (2, 4) needs 32",
     lambda s, o: o.load(_weights(lambda w: w.dims.__setitem__(1, 4)))),
    ("onnx-initializer-unknown-type", "load a model whose initializer has data_type 999", GraphError,
     "initializer 'w' has data_type 999, which is no ONNX element type",
     lambda s, o: o.load(_weights(lambda w: setattr(w, "data_type", 999)))),
    ("onnx-initializer-negative-dim", "load a model whose initializer has dims (-2, -3)", GraphError,
     "initializer 'w' has a negative dimension", lambda s, o: o.load(_weights(lambda w: w.dims.__setitem__(
         slice(None), [-2, -3])))),
    ("onnx-external-data-missing", "load a model file whose initializer lives in a missing weights.bin", GraphError,
     "tensor 'w' is stored in 'weights.bin', which is not a file beside the model",
     lambda s, o: o.load(_saved(s, _weights(_external), "external.onnx"))),
    ("onnx-external-data-not-loaded", "load a ModelProto whose initializer's external data was not loaded",
     GraphError, "initializer 'w' is stored in 'weights.bin', an external file, which was not loaded",
     lambda s, o: o.load(_weights(_external))),
    ("onnx-constant-value-short", "load a model whose Constant value's raw_data is cut to 7 bytes", GraphError,
     "node 'the_constant' (Constant): attribute 'value': raw_data holds 7 bytes",
     lambda s, o: o.load(_with(add_model(), _constant_cut))),
    ("onnx-output-produced-twice", "load a model where two nodes produce y", GraphError,
     "node 'second' (Relu): output 'y' is also produced by node 'the_add' (Add)",
     lambda s, o: o.load(_with(add_model(), _produced_twice))),
    ("onnx-input-names-nothing", "load a model whose node reads a value nothing produces", GraphError,
     "input 'nothing'", lambda s, o: o.load(_with(add_model(), _reads_nothing))),
    ("onnx-negative-input-dim", "load a model whose input x declares dimension -2", GraphError,
     "graph input 'x' declares a negative dimension", lambda s, o: o.load(_with(add_model(), _negative_input_dim))),
    ("onnx-subgraph-initializer-short", "load a model whose If branch has a cut initializer", GraphError,
     "the_if/then_branch/initializer 'w_then': raw_data holds 9 bytes",
     lambda s, o: o.load(_with(add_model(), _subgraph_cut))),
])


@misuse("onnx-run-wrong-input-name", A, "run a loaded model with input X instead of x", InvalidArgument,
        "unknown input(s) ['X']")
def _(s):
    plan = s.plan(_Onnx(s).load(relu_model()))
    return lambda: plan(X=X)

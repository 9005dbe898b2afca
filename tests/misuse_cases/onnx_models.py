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
])


@misuse("onnx-run-wrong-input-name", A, "run a loaded model with input X instead of x", InvalidArgument,
        "unknown input(s) ['X']")
def _(s):
    plan = s.plan(_Onnx(s).load(relu_model()))
    return lambda: plan(X=X)

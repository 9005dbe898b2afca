"""Structural checks of an ONNX model that ``onnx.checker`` leaves out (or that devicelayer's tolerance of
IR-3 models would let through), so that a malformed model is a GraphError naming the tensor or node at load,
never a NumPy or protobuf error later.

Checked in the graph and every subgraph: each tensor (initializers, tensor attributes such as Constant's
``value``) has an element type ONNX defines, no negative dimension, exactly the data its type and dimensions
need (``raw_data`` bytes or typed values), and external data that was loaded; graph inputs declare no negative
dimension and no name twice; initializers have distinct names; every node input names a graph input, an
initializer, an earlier node's output or a value of an enclosing graph; no value is produced twice; every
graph output is produced.  (Listing one output twice is accepted, as onnxruntime accepts it.)
"""

from __future__ import annotations

import math
from typing import Any, Iterable

from ..errors import GraphError
from .walk import unique_node_names

#: element types whose values are packed several to a byte: values per byte
_PACKED = {"UINT4": 2, "INT4": 2, "FLOAT4E2M1": 2, "UINT2": 4, "INT2": 4}


def check_model(model: Any) -> None:
    """GraphError naming what is malformed in ``model`` (a ModelProto), if anything."""
    check_graph(model.graph, set(), "")


def check_graph(graph: Any, outer: set[str], prefix: str) -> None:
    """The checks of the module's text over one GraphProto; ``outer``: names its enclosing graphs define."""
    where = f"{prefix}" if prefix else ""
    inputs: set[str] = set()
    for vi in graph.input:
        if vi.name in inputs:
            raise GraphError(f"{where}graph input {vi.name!r} is declared twice")
        inputs.add(vi.name)
        _check_dims(vi, f"{where}graph input {vi.name!r}")
    initializers: set[str] = set()
    for init in graph.initializer:
        if init.name in initializers:
            raise GraphError(f"{where}initializer {init.name!r} is given twice")
        initializers.add(init.name)
        check_tensor(init, f"{where}initializer {init.name!r}")
    known = outer | inputs | initializers | {""}
    made_by: dict[str, str] = {}
    names = unique_node_names(graph.node, prefix)
    for node, name in zip(graph.node, names):
        label = f"node {name!r} ({node.op_type})"
        for a in node.attribute:
            for k, t in enumerate(_tensors(a)):
                check_tensor(t, f"{label}: attribute {a.name!r}" + (f"[{k}]" if a.tensors else ""))
            for g in _graphs(a):
                check_graph(g, known, f"{name}/{a.name}/")
        for i in node.input:
            if i not in known:
                raise GraphError(f"{label}: input {i!r} is produced by no node, initializer or graph input "
                                 "before it")
        for o in node.output:
            if not o:
                continue
            if o in made_by:
                raise GraphError(f"{label}: output {o!r} is also produced by {made_by[o]}")
            if o in inputs or o in initializers:
                raise GraphError(f"{label}: output {o!r} is also a graph input or initializer")
            made_by[o] = label
        known.update(node.output)
    for vo in graph.output:
        if vo.name not in known or not vo.name:
            raise GraphError(f"{where}graph output {vo.name!r} is produced by no node, initializer or input")
        _check_dims(vo, f"{where}graph output {vo.name!r}")


def _tensors(attribute: Any) -> Iterable[Any]:
    if attribute.HasField("t"):
        yield attribute.t
    yield from attribute.tensors


def _graphs(attribute: Any) -> Iterable[Any]:
    if attribute.HasField("g"):
        yield attribute.g
    yield from attribute.graphs


def _check_dims(vi: Any, what: str) -> None:
    if vi.type.WhichOneof("value") != "tensor_type" or not vi.type.tensor_type.HasField("shape"):
        return
    for d in vi.type.tensor_type.shape.dim:
        if d.HasField("dim_value") and d.dim_value < 0:
            dims = [x.dim_value if x.HasField("dim_value") else x.dim_param or "?"
                    for x in vi.type.tensor_type.shape.dim]
            raise GraphError(f"{what} declares a negative dimension: {dims}")


def check_tensor(t: Any, what: str) -> None:
    """GraphError naming ``what`` for a TensorProto whose element type, dimensions or data are malformed."""
    import onnx
    from onnx import TensorProto

    kinds = dict(TensorProto.DataType.items())
    type_name = TensorProto.DataType.Name(t.data_type) if t.data_type in kinds.values() else None
    if type_name is None or t.data_type == TensorProto.UNDEFINED:
        raise GraphError(f"{what} has data_type {t.data_type}, which is no ONNX element type")
    dims = [int(d) for d in t.dims]
    if any(d < 0 for d in dims):
        raise GraphError(f"{what} has a negative dimension: dims {dims}")
    count = math.prod(dims)
    if t.data_location == TensorProto.EXTERNAL:
        location = next((e.value for e in t.external_data if e.key == "location"), None)
        if not location:
            raise GraphError(f"{what} is stored externally but names no file")
        raise GraphError(f"{what} is stored in {location!r}, an external file, which was not loaded (load the "
                         "model from its path, with the file beside it)")
    if t.data_type == TensorProto.STRING:
        return  # refused as a type later (UnsupportedOp)
    shape = f"{type_name} {tuple(dims)}"
    per_byte = _PACKED.get(type_name)
    if t.HasField("raw_data"):
        if per_byte:
            need = math.ceil(count / per_byte)
        else:
            try:
                itemsize = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
            except Exception:  # noqa: BLE001 - a type NumPy cannot hold (refused as a type later)
                return
            need = count * itemsize
        if len(t.raw_data) != need:
            raise GraphError(f"{what}: raw_data holds {len(t.raw_data)} bytes; {shape} needs {need}")
        return
    try:
        field = onnx.helper.tensor_dtype_to_field(t.data_type)
    except Exception:  # noqa: BLE001 - no typed field for this type (refused as a type later)
        return
    have = len(getattr(t, field))
    need = math.ceil(count / per_byte) if per_byte else count * (2 if type_name.startswith("COMPLEX") else 1)
    if have != need:
        raise GraphError(f"{what}: {field} holds {have} values; {shape} needs {need}"
                         + (" (the data may be in another field than its type's)" if have == 0 and need else ""))

"""ONNX model -> devicelayer Graph.

The loader walks the ONNX graph in order, keeping every tensor either as a
NumPy constant (initializers, Constant nodes, anything computed only from
constants) or as a Value of the devicelayer Graph being built.  A node whose
inputs are all constants is evaluated now (folding Shape, ConstantOfShape,
Range, the targets of Reshape ...); every other node goes through the
converter of its op type (``converters.CONVERTERS``), which adds one or more
library ops.  Constants become Graph constants only where a device op reads
them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..errors import DeviceLayerError, GraphError, InvalidArgument, UnsupportedOp
from ..graph.fold import fold_affine, fuse_activations
from ..graph.ir import Graph, Value
from ..graph.shuffle import fuse_channel_shuffles

#: op types never folded even when their inputs are constant (not deterministic)
_NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}


def _onnx():
    try:
        import onnx
    except ImportError as exc:  # pragma: no cover - onnx is a dependency of this front end
        raise UnsupportedOp("the ONNX front end needs the 'onnx' package (pip install onnx)") from exc
    return onnx


def np_dtype(elem_type: int) -> np.dtype:
    """NumPy dtype of an ONNX TensorProto element type: numbers and bool, bfloat16, float8, float4, int4/int2
    (``devicelayer.dtypes``); UnsupportedOp for strings, complex numbers and float6."""
    from ..dtypes import is_number

    onnx = _onnx()
    try:
        dt = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:
        raise UnsupportedOp(f"ONNX element type {elem_type} has no NumPy dtype") from None
    if not is_number(dt):
        name = onnx.TensorProto.DataType.Name(elem_type) if elem_type else "UNDEFINED"
        raise UnsupportedOp(f"ONNX element type {name} is not supported (numbers and bool only)")
    return dt


def read_model(source: Any) -> Any:
    """A checked ModelProto from a path, bytes or a ModelProto; GraphError when it is malformed."""
    onnx = _onnx()
    if isinstance(source, onnx.ModelProto):
        model = source
    elif isinstance(source, (bytes, bytearray)):
        model = onnx.ModelProto()
        try:
            model.ParseFromString(bytes(source))
        except Exception as exc:
            raise GraphError(f"not an ONNX model (the protobuf does not parse): {exc}") from None
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.is_file():
            raise GraphError(f"no ONNX model file at {str(path)!r}")
        try:
            model = onnx.load(str(path))
        except Exception as exc:
            raise GraphError(f"{path}: not an ONNX model (the protobuf does not parse): "
                             f"{type(exc).__name__}: {exc}") from None
    else:
        raise InvalidArgument(f"load: expected a path, bytes or an onnx.ModelProto, got {type(source).__name__}")
    try:
        # full_check=False: the checker's structural checks; shape inference runs separately (below, lenient)
        onnx.checker.check_model(model)
    except Exception as exc:
        first = str(exc).strip().splitlines()
        raise GraphError(f"the ONNX model fails the checker: {' '.join(first[:3])[:500]}") from None
    if not model.graph.node and not model.graph.output:
        raise GraphError("the ONNX model has an empty graph")
    return model


def opset_of(model: Any) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 1


def attributes(node: Any) -> dict[str, Any]:
    """A node's attributes as Python values (strings decoded, tensors as arrays)."""
    onnx = _onnx()
    out = {}
    for a in node.attribute:
        if a.ref_attr_name:
            raise UnsupportedOp(f"attribute {a.name!r} references a function attribute")
        v = onnx.helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, onnx.TensorProto):
            v = onnx.numpy_helper.to_array(v)
        elif isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [s.decode() for s in v]
        out[a.name] = v
    return out


@dataclass
class Context:
    """State of one conversion, handed to the converters."""

    graph: Graph
    opset: int
    opsets: dict[str, int]
    env: dict[str, Value | np.ndarray] = field(default_factory=dict)
    _materialized: dict[int, tuple[np.ndarray, Value]] = field(default_factory=dict)
    _names: set[str] = field(default_factory=set)
    node: Any = None
    node_name: str = ""

    # -- reading inputs --------------------------------------------------------------------------
    def has(self, i: int) -> bool:
        """Whether optional input ``i`` of the current node is given."""
        return i < len(self.node.input) and self.node.input[i] != ""

    def raw(self, i: int) -> Value | np.ndarray:
        return self.env[self.node.input[i]]

    def const(self, i: int) -> np.ndarray | None:
        """Input ``i`` as a NumPy array when it is a constant (None when absent or computed at run time)."""
        if not self.has(i):
            return None
        x = self.raw(i)
        return x if isinstance(x, np.ndarray) else None

    def need_const(self, i: int, what: str) -> np.ndarray | None:
        """Input ``i`` (absent: None) which must be constant at load time; UnsupportedOp otherwise."""
        if not self.has(i):
            return None
        x = self.const(i)
        if x is None:
            raise UnsupportedOp(f"{what} (input {i}, {self.node.input[i]!r}) is computed at run time; "
                                "only constant values are supported")
        return x

    def on_host(self, fn: Callable[[list[np.ndarray]], list[np.ndarray]], inputs: Sequence[Value | np.ndarray],
                what: str) -> list[np.ndarray]:
        """``fn`` (NumPy arrays in, a list of NumPy arrays out) applied on the host to the values of ``inputs``:
        for ops whose output shape depends on the data (NonZero, Unique, Compress, NonMaxSuppression).  Now
        when every input is a constant; an input computed at run time is refused (UnsupportedOp naming
        ``what``) until plans split at such nodes."""
        if not all(isinstance(x, np.ndarray) for x in inputs):
            raise UnsupportedOp(f"{what}: the output shape depends on values computed at run time")
        return [np.asarray(r) for r in fn([np.asarray(x) for x in inputs])]

    def value(self, i: int) -> Value:
        """Input ``i`` as a graph Value (constants become graph constants, once)."""
        return self.as_value(self.raw(i))

    def as_value(self, x: Value | np.ndarray) -> Value:
        if isinstance(x, Value):
            return x
        hit = self._materialized.get(id(x))
        if hit is not None:
            return hit[1]
        v = self.graph.constant(np.ascontiguousarray(x))
        self._materialized[id(x)] = (x, v)  # holding x keeps its id unique
        return v

    def values(self) -> list[Value]:
        return [self.value(i) for i in range(len(self.node.input)) if self.has(i)]

    # -- building ---------------------------------------------------------------------------------
    def name(self, suffix: str = "") -> str:
        """A fresh library node name derived from the ONNX node's name."""
        base = self.node_name + (f"/{suffix}" if suffix else "")
        name, k = base, 1
        while name in self._names or name in self.graph.values:
            name = f"{base}_{k}"
            k += 1
        self._names.add(name)
        return name

    def add(self, op: str, inputs: Sequence[Value | np.ndarray], suffix: str = "", **attrs: Any) -> list[Value]:
        ins = [self.as_value(x) for x in inputs]
        return self.graph.apply(op, ins, name=self.name(suffix), **attrs)

    def op(self, op: str, inputs: Sequence[Value | np.ndarray], suffix: str = "", **attrs: Any) -> Value:
        return self.add(op, inputs, suffix, **attrs)[0]


Converter = Callable[[Context, dict[str, Any]], Sequence[Value | np.ndarray | None]]


def _fold(ctx: Context, node: Any, model_ir: int) -> list[np.ndarray]:
    """Evaluate a node whose inputs are all constants (NumPy / ONNX's reference evaluator)."""
    from .converters import FOLDERS

    ins = [ctx.env[n] if n else None for n in node.input]
    quick = FOLDERS.get(node.op_type)
    if quick is not None and node.domain in ("", "ai.onnx"):
        res = quick(ctx, attributes(node), ins)
        if res is not None:
            return res
    onnx = _onnx()
    from onnx.reference import ReferenceEvaluator

    names = [f"in{i}" if n else "" for i, n in enumerate(node.input)]
    outs = [f"out{i}" if n else "" for i, n in enumerate(node.output)]
    single = onnx.helper.make_node(node.op_type, names, outs, domain=node.domain)
    single.attribute.extend(node.attribute)
    feeds = {nm: x for nm, x in zip(names, ins) if nm}
    graph = onnx.helper.make_graph(
        [single], "fold",
        [onnx.helper.make_tensor_value_info(nm, onnx.helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for nm, x in feeds.items()],
        [onnx.helper.make_empty_tensor_value_info(o) for o in outs if o])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid(d, v)
                                                         for d, v in ctx.opsets.items()])
    model.ir_version = model_ir
    ref = ReferenceEvaluator(model)
    results = ref.run(None, feeds)
    return [np.asarray(r) for r in results]


def _unique_node_names(nodes: Sequence[Any]) -> list[str]:
    seen: dict[str, int] = {}
    names = []
    for i, n in enumerate(nodes):
        base = n.name or f"{n.op_type}_{i}"
        k = seen.get(base, 0)
        seen[base] = k + 1
        names.append(base if k == 0 else f"{base}_{k}")
    return names


def _input_shape(vi: Any, input_shapes: Mapping[str, Sequence[int]] | None) -> tuple[int, ...]:
    given = (input_shapes or {}).get(vi.name)
    tt = vi.type.tensor_type
    declared = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tt.shape.dim]
    if given is not None:
        try:
            shape = tuple(int(s) for s in given)
        except (TypeError, ValueError):
            raise InvalidArgument(f"input_shapes[{vi.name!r}] must be a sequence of ints, got {given!r}") from None
        if tt.HasField("shape") and len(shape) != len(declared):
            raise InvalidArgument(f"input_shapes[{vi.name!r}] = {shape} has rank {len(shape)}; "
                                  f"the model declares rank {len(declared)}")
        for k, (s, d) in enumerate(zip(shape, declared)):
            if d is not None and s != d:
                raise InvalidArgument(f"input_shapes[{vi.name!r}] = {shape}: dim {k} is fixed to {d} by the model")
        return shape
    if not tt.HasField("shape"):
        raise GraphError(f"graph input {vi.name!r} has no declared shape; give it in input_shapes")
    return tuple(1 if d is None else d for d in declared)


def convert(model: Any, input_shapes: Mapping[str, Sequence[int]] | None = None, fold: bool = True) -> Graph:
    """Build a Graph from a checked ModelProto (``fold``: per-channel affine maps folded into the conv or
    batch normalization before them and ReLUs into convs, see ``devicelayer.graph.fold``; reshape-transpose-reshape
    channel shuffles made one ``channel_shuffle``, see ``devicelayer.graph.shuffle``)."""
    from .converters import CONVERTERS

    onnx = _onnx()
    opsets = {imp.domain or "": int(imp.version) for imp in model.opset_import}
    if "ai.onnx" in opsets:
        opsets[""] = opsets.pop("ai.onnx")
    opset = opsets.get("", 1)
    newest = onnx.defs.onnx_opset_version()
    if not 1 <= opset <= newest:
        raise UnsupportedOp(f"the model imports ONNX opset {opset}; devicelayer reads opsets 1 to {newest} "
                            f"(the newest the installed onnx {onnx.__version__} knows)")
    if input_shapes is not None and not isinstance(input_shapes, Mapping):
        raise InvalidArgument(f"input_shapes must map input names to shapes, got {type(input_shapes).__name__}")
    g = Graph(model.graph.name or "onnx")
    ctx = Context(g, opset, opsets)
    for f in model.functions:
        raise UnsupportedOp(f"model-local function {f.domain}.{f.name} is not supported")

    # initializers (and Constant-like inputs) are constants
    for init in model.graph.initializer:
        try:
            arr = onnx.numpy_helper.to_array(init)
        except Exception as exc:
            raise GraphError(f"initializer {init.name!r} cannot be read: {exc}") from None
        if arr.dtype.kind not in "biuf":
            raise UnsupportedOp(f"initializer {init.name!r} has dtype {arr.dtype}; only numbers and bool")
        ctx.env[init.name] = np.array(arr)
    for sp in model.graph.sparse_initializer:
        raise UnsupportedOp(f"sparse initializer {sp.values.name!r} is not supported")
    known_inputs = set(input_shapes or {})
    for vi in model.graph.input:
        if vi.name in ctx.env:
            continue
        if not vi.type.HasField("tensor_type"):
            raise UnsupportedOp(f"graph input {vi.name!r} is not a tensor ({vi.type.WhichOneof('value')})")
        dt = np_dtype(vi.type.tensor_type.elem_type)
        ctx.env[vi.name] = g.input(vi.name, _input_shape(vi, input_shapes), dt)
        known_inputs.discard(vi.name)
    if known_inputs:
        raise InvalidArgument(f"input_shapes names {sorted(known_inputs)}, which are not graph inputs "
                              f"(the model takes {[v.name for v in g.inputs]})")

    names = _unique_node_names(model.graph.node)
    for node, node_name in zip(model.graph.node, names):
        ctx.node, ctx.node_name = node, node_name
        where = f"node {node_name!r} ({node.op_type})"
        for i, inp in enumerate(node.input):
            if inp and inp not in ctx.env:
                raise GraphError(f"{where}: input {i} {inp!r} is produced by no node, initializer or graph input")
        if node.domain not in ("", "ai.onnx"):
            raise UnsupportedOp(f"{where}: op domain {node.domain!r} is not supported (only the default domain)")
        given = [ctx.env[n] for n in node.input if n]
        foldable = all(isinstance(x, np.ndarray) for x in given) and node.op_type not in _NO_FOLD \
            and (given or node.op_type in ("Constant", "ConstantOfShape", "Range", "EyeLike"))
        # Shape / Size of a value with a static shape are constants
        if not foldable and node.op_type in ("Shape", "Size") and given:
            foldable = True
        try:
            if foldable:
                outs = _fold_or_shape(ctx, node, model.ir_version)
            else:
                conv = CONVERTERS.get(node.op_type)
                if conv is None:
                    raise UnsupportedOp(f"{where}: op type {node.op_type!r} is not supported")
                outs = list(conv(ctx, attributes(node)))
        except UnsupportedOp as exc:
            msg = str(exc)
            raise UnsupportedOp(msg if msg.startswith(where) else f"{where}: {msg}") from None
        except GraphError as exc:
            msg = str(exc)
            raise GraphError(msg if msg.startswith(where) else f"{where}: {msg}") from None
        except DeviceLayerError as exc:
            raise GraphError(f"{where}: {exc}") from None
        except Exception as exc:
            raise GraphError(f"{where}: cannot be converted: {type(exc).__name__}: {exc}") from None
        for k, out_name in enumerate(node.output):
            if not out_name:
                continue
            if k >= len(outs) or outs[k] is None:
                raise UnsupportedOp(f"{where}: output {k} ({out_name!r}) is not supported")
            ctx.env[out_name] = outs[k]

    if not model.graph.output:
        raise GraphError("the ONNX graph has no outputs")
    for vo in model.graph.output:
        if vo.name not in ctx.env:
            raise GraphError(f"graph output {vo.name!r} is produced by no node, initializer or input")
        x = ctx.env[vo.name]
        v = ctx.as_value(x)
        if v.name in g.outputs:
            v = ctx.as_value(np.array(x)) if isinstance(x, np.ndarray) else v
        g.output(vo.name, v)
    return fuse_channel_shuffles(fuse_activations(fold_affine(g))) if fold else g


def _fold_or_shape(ctx: Context, node: Any, ir: int) -> list[np.ndarray]:
    if node.op_type in ("Shape", "Size"):
        x = ctx.env[node.input[0]]
        shape = np.array(x.shape, dtype=np.int64)
        if node.op_type == "Size":
            return [np.array(int(np.prod(shape)), dtype=np.int64)]
        a = attributes(node)
        r = len(shape)
        start = a.get("start", 0)
        end = a.get("end", r)
        start = min(max(start + r if start < 0 else start, 0), r)
        end = min(max(end + r if end < 0 else end, 0), r)
        return [shape[start:end]]
    return _fold(ctx, node, ir)


def load(source: Any, input_shapes: Mapping[str, Sequence[int]] | None = None, fold: bool = True) -> Graph:
    """Load an ONNX model (path, bytes or ModelProto) as a devicelayer Graph.

    ``input_shapes`` maps input names to shapes for dynamic dimensions
    (``dim_param`` or 0); a dynamic dimension not given is 1.
    With ``fold`` (the default) a BatchNormalization, Mul or Add by per-channel
    constants right after a Conv or BatchNormalization is folded into its
    parameters (those nodes are then not in the graph), as inference runtimes do.
    Unsupported ops raise UnsupportedOp naming the op type and the node; a
    malformed model raises GraphError.
    """
    model = read_model(source)
    return convert(model, input_shapes, fold)

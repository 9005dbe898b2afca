"""An ONNX model as devicelayer runs it: inputs with symbolic dimensions, compiled into a plan specialised per
signature of input shapes.

``OnnxModel.compile`` gives a ``graph.dynamic.DynamicPlan`` whose stages are
walks over the model's nodes (``walk.py``): the first from the model's inputs,
each later one from the point where the previous walk was cut (a value needed
on the host, a host computation, a driver over a subgraph).  ``graph()`` gives
the one Graph of a signature that needs no cut.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import GraphError, InvalidArgument, UnsupportedOp
from ..graph.dynamic import Cut as PlanCut, DynamicPlan, InputSpec, PinInputs, SegmentSpec
from ..graph.fold import fold_affine, fuse_activations
from ..graph.ir import Graph, Value
from ..graph.shuffle import fuse_channel_shuffles
from . import rawdata
from .loader import Context, _onnx, input_dims, np_dtype
from .walk import Cut, NeedDriver, NeedHost, NeedValues, Program, bind_inputs, values_of, walk


def _input_spec(vi: Any, input_shapes: Mapping[str, Sequence[int]] | None) -> InputSpec:
    """The InputSpec of a graph input (``input_shapes`` fixing its symbolic dimensions)."""
    t = vi.type
    which = t.WhichOneof("value")
    if which == "sequence_type":
        elem = t.sequence_type.elem_type
        dt = np_dtype(elem.tensor_type.elem_type) if elem.HasField("tensor_type") else None
        return InputSpec(vi.name, None, dt, "sequence")
    if which == "optional_type":
        elem = t.optional_type.elem_type
        if elem.HasField("tensor_type"):
            return InputSpec(vi.name, input_dims(elem), np_dtype(elem.tensor_type.elem_type), "optional")
        return InputSpec(vi.name, None, None, "optional")
    if which != "tensor_type":
        raise UnsupportedOp(f"graph input {vi.name!r} is a {which}, not a tensor, sequence or optional")
    dt = np_dtype(t.tensor_type.elem_type)
    dims = input_dims(vi.type)
    given = (input_shapes or {}).get(vi.name)
    if given is not None:
        try:
            shape = tuple(int(s) for s in given)
        except (TypeError, ValueError):
            raise InvalidArgument(f"input_shapes[{vi.name!r}] must be a sequence of ints, got {given!r}") from None
        if dims is not None:
            if len(shape) != len(dims):
                raise InvalidArgument(f"input_shapes[{vi.name!r}] = {shape} has rank {len(shape)}; the model "
                                      f"declares rank {len(dims)}")
            for k, (s, d) in enumerate(zip(shape, dims)):
                if isinstance(d, int) and s != d:
                    raise InvalidArgument(f"input_shapes[{vi.name!r}] = {shape}: dim {k} is fixed to {d} by the "
                                          "model")
        dims = shape
    return InputSpec(vi.name, dims, dt, "tensor")


def _initializers(graph: Any, raw: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """A GraphProto's initializers as NumPy arrays (GraphError for one that cannot be read); ``raw``: the raw bytes
    of some, read already (name -> uint8 array)."""
    onnx = _onnx()
    out = {}
    for init in graph.initializer:
        dt = np_dtype(init.data_type)  # refuses strings and what has no NumPy dtype
        read = None if raw is None else raw.get(init.name)
        array = _raw_array(init, dt, read)
        if array is not None:
            out[init.name] = array
            continue
        rawdata.give_back(init, read)  # (parsed without it: numpy_helper decodes it)
        try:
            out[init.name] = np.array(onnx.numpy_helper.to_array(init))
        except Exception as exc:  # noqa: BLE001 - onnx raises several kinds for a malformed tensor
            raise GraphError(f"initializer {init.name!r} cannot be read: {type(exc).__name__}: {exc}") from None
    for sp in graph.sparse_initializer:
        raise UnsupportedOp(f"sparse initializer {sp.values.name!r} is not supported")
    return out


def _raw_array(init: Any, dt: np.dtype, read: np.ndarray | None = None) -> np.ndarray | None:
    """A tensor kept as little-endian bytes of a plain NumPy type, as a read-only array over those bytes (read
    once: a 100 MB model's weights are not copied twice), ``read`` where given (the same bytes read from the
    file); None for any other storage."""
    if (sys.byteorder != "little" or dt.kind not in "biufc" or dt.type.__module__ != "numpy"
            or (read is None and not init.HasField("raw_data")) or init.data_location != 0):
        return None
    raw = init.raw_data if read is None else read
    dims = tuple(int(d) for d in init.dims)
    if len(raw) != dt.itemsize * math.prod(dims):
        raise GraphError(f"initializer {init.name!r} cannot be read: {len(raw)} bytes of raw data for shape "
                         f"{dims} of {dt}")
    return np.frombuffer(raw, dt).reshape(dims)


def _types_key(values: Mapping[str, Any]) -> Any:
    """What a walk's first segment depends on in its inputs: each name's shape and dtype (None where an input
    is no plain array)."""
    if not all(isinstance(x, np.ndarray) for x in values.values()):
        return None
    return tuple(sorted((name, x.shape, x.dtype.str) for name, x in values.items()))


def _example(spec: InputSpec) -> Any:
    """A value of the declared type (symbolic dimensions 1) standing for the input in a trial walk."""
    if spec.kind == "sequence" or spec.dtype is None:
        return None
    if spec.dims is None:
        raise GraphError(f"graph input {spec.name!r} has no declared shape; give it in input_shapes")
    return np.zeros(tuple(d if isinstance(d, int) else 1 for d in spec.dims), spec.dtype)


class OnnxModel:
    """An ONNX model loaded for devicelayer: ``compile(devices)`` gives a plan for every input shape it allows;
    ``inputs`` lists each input with its dimensions (ints where fixed, names or None where symbolic)."""

    def __init__(self, model: Any, input_shapes: Mapping[str, Sequence[int]] | None = None,
                 fold: bool = True, *, raw: Mapping[str, np.ndarray] | None = None) -> None:
        onnx = _onnx()
        self.proto = model
        opsets = {imp.domain or "": int(imp.version) for imp in model.opset_import}
        if "ai.onnx" in opsets:
            opsets[""] = opsets.pop("ai.onnx")
        self.opsets = opsets
        self.opset = opsets.get("", 1)
        self.ir_version = int(model.ir_version or 8)
        newest = onnx.defs.onnx_opset_version()
        if not 1 <= self.opset <= newest:
            raise UnsupportedOp(f"the model imports ONNX opset {self.opset}; devicelayer reads opsets 1 to "
                                f"{newest} (the newest the installed onnx {onnx.__version__} knows)")
        if input_shapes is not None and not isinstance(input_shapes, Mapping):
            raise InvalidArgument(f"input_shapes must map input names to shapes, got {type(input_shapes).__name__}")
        for f in model.functions:
            raise UnsupportedOp(f"model-local function {f.domain}.{f.name} is not supported")
        self.fold = fold
        self.name = model.graph.name or "onnx"
        self.constants = _initializers(model.graph, raw)  # (raw: initializers' bytes read from the file already)
        known = set(input_shapes or {})
        self.inputs: list[InputSpec] = []
        for vi in model.graph.input:
            if vi.name in self.constants:
                continue
            self.inputs.append(_input_spec(vi, input_shapes))
            known.discard(vi.name)
        if known:
            raise InvalidArgument(f"input_shapes names {sorted(known)}, which are not graph inputs (the model takes "
                                  f"{[i.name for i in self.inputs]})")
        self.output_names = [o.name for o in model.graph.output]
        if not self.output_names:
            raise GraphError("the ONNX graph has no outputs")
        self.program = Program(model.graph.node, self.output_names)
        #: the trial walk's context and cut by the input types it walked, for the first segment of those types
        self._walked: dict[Any, tuple[Context, Cut | None]] = {}
        self._trial()

    @classmethod
    def subgraph(cls, graph: Any, parent: "OnnxModel", inputs: Sequence[InputSpec], outer: Mapping[str, Any],
                 name: str) -> "OnnxModel":
        """A subgraph (Loop or Scan body, If branch) as a model of its own: ``inputs`` are its formal inputs
        and the outer values it reads that are computed at run time, ``outer`` the outer constants it reads."""
        self = cls.__new__(cls)
        self.proto = graph
        self.opsets, self.opset, self.ir_version = parent.opsets, parent.opset, parent.ir_version
        self.fold = parent.fold
        self.name = name
        self.constants = {**outer, **_initializers(graph)}
        self.inputs = list(inputs)
        self.output_names = [o.name for o in graph.output]
        self.program = Program(graph.node, self.output_names, prefix=f"{name}/")
        self._walked = {}
        return self

    # -- specialising -------------------------------------------------------------------------------
    def context(self, graph: Graph) -> Context:
        """A conversion context over ``graph`` with the model's constants in its environment."""
        return Context(graph, self.opset, self.opsets, dict(self.constants), self.ir_version, owner=self)

    def builder(self, start: int, names: Sequence[str], carried: Mapping[str, Any]) -> Any:
        """The segment builder of the stage that starts at node ``start`` with ``names`` flowing in and the host
        constants ``carried`` from before."""
        def build(values: Mapping[str, Any], pinned: Mapping[str, np.ndarray]) -> SegmentSpec:
            key = _types_key(values) if start == 0 and not carried and not pinned and self._walked else None
            if key is not None:
                walked = self._walked.pop(key, None)  # the load's trial walk, taken once
                if walked is not None:
                    return self._segment(*walked, set(names))
            g = Graph(self.name)
            ctx = self.context(g)
            ctx.env.update(carried)
            bind_inputs(g, ctx.env, {n: values[n] for n in names if n in values}, pinned)
            cut = walk(ctx, self.program, start)
            return self._segment(ctx, cut, set(names))
        return build

    def _segment(self, ctx: Context, cut: Cut | None, stage_inputs: set[str]) -> SegmentSpec:
        """The SegmentSpec of a finished walk: its graph's outputs, host constants and the cut after it."""
        g, env = ctx.graph, ctx.env
        plan_cut = None
        if cut is None:
            handed = self.output_names
        else:
            handed = cut.live
            need = cut.reason
            if isinstance(need, NeedValues):
                if all(n in stage_inputs and isinstance(env.get(n), Value) and env[n].producer is None
                       for n in need.names):
                    raise PinInputs(need.names)
                then = self.builder(cut.index, [n for n in cut.live if n not in cut.constants], cut.constants)
                plan_cut = PlanCut("values", list(need.names), f"{ctx.node_name}: {need.what}", then)
            else:
                node = self.program.nodes[cut.index]
                outs = [o for o in node.output if o]
                after = self.program.live[cut.index + 1]
                names = [n for n in cut.live if n in after and n not in cut.constants] + outs
                constants = {n: x for n, x in cut.constants.items() if n in after}
                then = self.builder(cut.index + 1, names, constants)
                if isinstance(need, NeedHost):
                    plan_cut = PlanCut("host", list(need.names), f"{ctx.node_name}: {need.what}", then,
                                       need.fn, outs)
                else:
                    assert isinstance(need, NeedDriver)
                    plan_cut = PlanCut("driver", list(need.names), f"{ctx.node_name}: {need.what}", then,
                                       need.driver, outs)
        outputs: dict[str, Any] = {}
        constants: dict[str, Any] = {}
        taken: dict[int, str] = {}
        for name in handed:
            if name not in env:
                raise GraphError(f"graph output {name!r} is produced by no node, initializer or input")
            x = env[name]
            if values_of(x):
                outputs[name] = _outputs_for(g, name, x, taken)
            elif x is None:
                outputs[name] = None
            else:
                constants[name] = x
        if self.fold and g.nodes:
            g = fuse_channel_shuffles(fuse_activations(fold_affine(g)))
        return SegmentSpec(g, outputs, constants, plan_cut)

    def graph(self, input_shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
        """The Graph for one signature: the declared shapes, with ``input_shapes`` for symbolic dimensions (1
        where not given).  UnsupportedOp where the model needs run-time values to go on (compile it instead)."""
        values = {}
        for spec in self.inputs:
            if spec.kind != "tensor":
                raise UnsupportedOp(f"input {spec.name!r} is a {spec.kind}: compile the model instead")
            given = (input_shapes or {}).get(spec.name)
            values[spec.name] = np.zeros(tuple(given), spec.dtype) if given is not None else _example(spec)
        g = Graph(self.name)
        ctx = self.context(g)
        bind_inputs(g, ctx.env, values, {})
        walk(ctx, self.program, 0, allow_cut=False)
        spec = self._segment(ctx, None, set(values))
        out = spec.graph
        for name, x in spec.constants.items():  # outputs known at load time become constants of the graph
            out.output(name, out.constant(np.array(x), name=_free_name(out, name)))
        return out

    def _trial(self) -> None:
        """Walk the model once at its declared shapes (symbolic dimensions 1) so that what devicelayer cannot
        convert is refused at load.  Errors that depend on the shapes are raised only where every dimension is
        fixed; with symbolic dimensions they wait for the real shapes."""
        fixed = all(s.kind == "tensor" and s.dims is not None and all(isinstance(d, int) for d in s.dims)
                    for s in self.inputs)
        values = {s.name: _example(s) for s in self.inputs}
        if any(v is None for v in values.values()):
            return
        g = Graph(self.name)
        ctx = self.context(g)
        bind_inputs(g, ctx.env, values, {})
        try:
            cut = walk(ctx, self.program, 0)
        except UnsupportedOp as exc:
            if fixed or "is not supported" in str(exc):
                raise
            return
        except (GraphError, InvalidArgument):
            if fixed:
                raise
            return
        if cut is not None:
            self._check_op_types(cut.index + 1)
        key = _types_key(values)
        if key is not None:
            self._walked[key] = (ctx, cut)

    def _check_op_types(self, start: int) -> None:
        """UnsupportedOp for a node from ``start`` on whose op type has no converter and whose inputs are not all
        initializers (it could not be evaluated at load)."""
        from .converters import CONVERTERS, FOLDERS

        for k in range(start, len(self.program.nodes)):
            node = self.program.nodes[k]
            if node.domain not in ("", "ai.onnx"):
                raise UnsupportedOp(f"node {self.program.names[k]!r} ({node.op_type}): op domain {node.domain!r} "
                                    "is not supported (only the default domain)")
            known = node.op_type in CONVERTERS or node.op_type in FOLDERS or node.op_type in ("Shape", "Size")
            if not known and not all(n in self.constants for n in node.input if n):
                raise UnsupportedOp(f"node {self.program.names[k]!r} ({node.op_type}): op type "
                                    f"{node.op_type!r} is not supported")

    # -- compiling ---------------------------------------------------------------------------------
    def compile(self, devices: Any = "auto", placement: Mapping[str, Any] | None = None, strict: bool = False,
                policy: str = "fill", record: bool = True, cache_size: int = 16, fuse: bool = True,
                parallel: str = "model", timeout: float | None = None, allow_tf32: bool = False) -> Any:
        """A plan for every input shape the model allows: specialised on the first run with a new signature of
        input shapes (and cached: at most ``cache_size`` per stage, least recently used out); a model whose input
        shapes are all fixed is specialised now.  ``devices``,
        ``placement``, ``strict``, ``policy``, ``record`` and ``fuse`` as for ``Graph.compile``.

        Devices of cluster nodes (``"<node>/<local id>"``) take a model of fixed input shapes (for symbolic
        ones: ``model.graph(input_shapes).compile(...)``); ``parallel`` and ``timeout`` as for
        ``Graph.compile`` there.  ``allow_tf32`` lets float32 products and convolutions run TF32 where a device
        has such units (``Graph.compile``)."""
        from ..graph import remote

        if not isinstance(devices, str) and isinstance(devices, Sequence) and any(
                remote.is_qualified(d) or remote.is_remote(d) for d in devices):
            symbolic = [s.name for s in self.inputs if s.kind != "tensor" or s.dims is None
                        or not all(isinstance(d, int) for d in s.dims)]
            if symbolic:
                raise InvalidArgument(f"compile: inputs {symbolic} have symbolic dimensions; a plan over cluster "
                                      f"nodes takes fixed shapes: model.graph(input_shapes).compile(devices)")
            return self.graph().compile(devices, None if placement is None else dict(placement), strict, policy,
                                        record, fuse=fuse, parallel=parallel, timeout=timeout, allow_tf32=allow_tf32)
        plan = DynamicPlan(self.builder(0, [s.name for s in self.inputs], {}), self.inputs, self.output_names,
                           devices, placement, strict, policy, record, cache_size, self.name, fuse, allow_tf32)
        plan.prepare_declared()  # a model of fixed shapes is placed and compiled now, as Graph.compile does
        return plan

    def __repr__(self) -> str:
        ins = ", ".join(f"{s.name}: {s.dims if s.kind == 'tensor' else s.kind}" for s in self.inputs)
        return f"<OnnxModel {self.name}: {len(self.program.nodes)} nodes; inputs {ins}>"


def _free_name(g: Graph, base: str) -> str:
    name, k = base, 1
    while name in g.values:
        name = f"{base}_{k}"
        k += 1
    return name


def _outputs_for(g: Graph, name: str, x: Any, taken: dict[int, str]) -> Any:
    """Graph outputs for an environment entry handed on: a Value (once per Value), a sequence element by
    element (constants among them become graph constants)."""
    if isinstance(x, list):
        return [_outputs_for(g, f"{name}#{i}", e, taken) for i, e in enumerate(x)]
    if not isinstance(x, Value):
        x = g.constant(np.array(x), name=_free_name(g, f"{name}:const"))
    if id(x) in taken:
        return taken[id(x)]
    g.output(name, x)
    taken[id(x)] = name
    return name

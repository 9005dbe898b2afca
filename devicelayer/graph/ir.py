"""Graph IR: values (shape, dtype) and nodes (op, inputs, outputs, attributes), built from Python or ONNX.

Shapes and dtypes are inferred as nodes are added, so an error names the op
and the node at build time.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..casting import to_dtype
from ..errors import DeviceLayerError, GraphError, InvalidArgument
from ..memory import device_dtype
from ..kernels import ops as _library  # noqa: F401  (registers every op)
from ..kernels.op import OPS, TensorType, get


@dataclass(eq=False)
class Value:
    """A tensor of the graph: produced by one node (or an input or constant), read by any."""

    name: str
    type: TensorType
    producer: "Node | None" = None
    constant: np.ndarray | None = None
    graph: "Graph | None" = field(default=None, repr=False)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> np.dtype:
        return self.type.dtype

    def __repr__(self) -> str:
        return f"<Value {self.name} {self.shape} {self.dtype}>"


@dataclass(eq=False)
class Node:
    """One op application."""

    name: str
    op: str
    inputs: list[Value]
    outputs: list[Value]
    attrs: dict[str, Any]

    def __repr__(self) -> str:
        return f"<Node {self.name}: {self.op}>"


class Graph:
    """A dataflow graph of ops; ``g.relu(x)``, ``g.matmul(a, b)`` — one builder method per op of the library."""

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self.nodes: list[Node] = []
        self.inputs: list[Value] = []
        self.outputs: dict[str, Value] = {}
        self.values: dict[str, Value] = {}
        self._counter = itertools.count()
        self._node_names: set[str] = set()
        self.version = 0  # bumped on every change; compiled plans check it

    # -- building ----------------------------------------------------------------------
    def _fresh(self, stem: str) -> str:
        while True:
            name = f"{stem}_{next(self._counter)}"
            if name not in self.values:
                return name

    def _add_value(self, value: Value) -> Value:
        if value.name in self.values:
            raise GraphError(f"{self.name}: a value named {value.name!r} already exists")
        value.graph = self
        self.values[value.name] = value
        self.version += 1
        return value

    def input(self, name: str, shape: Sequence[int], dtype: Any = np.float32) -> Value:
        """A graph input fed at run time."""
        if not isinstance(name, str) or not name:
            raise InvalidArgument("input: a name is required")
        try:
            shape = tuple(int(s) for s in shape)
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(f"input {name!r}: bad shape: {exc}") from None
        if any(s < 0 for s in shape):
            raise InvalidArgument(f"input {name!r}: negative dimension in {shape}")
        dt = device_dtype(dtype, f"input {name!r}")
        v = self._add_value(Value(name, TensorType(shape, dt)))
        self.inputs.append(v)
        return v

    def constant(self, array: Any, name: str | None = None) -> Value:
        """A constant tensor (weights); uploaded once when a plan is prepared."""
        arr = np.asarray(array)
        if not arr.flags.c_contiguous:
            arr = arr.copy(order="C")
        device_dtype(arr.dtype, "constant")
        return self._add_value(Value(name or self._fresh("const"), TensorType(arr.shape, arr.dtype), constant=arr))

    def _as_value(self, x: Any, like: Value | None) -> Value:
        if isinstance(x, Value):
            if x.graph is not self:
                raise GraphError(f"{self.name}: value {x.name!r} belongs to another graph")
            return x
        if isinstance(x, (int, float, np.generic, np.ndarray, list)):
            if like is not None and not isinstance(x, np.ndarray):  # a scalar or list takes its operand's dtype
                return self.constant(to_dtype(x, like.dtype, f"{self.name}: constant {x!r}"))
            return self.constant(np.asarray(x))
        raise InvalidArgument(f"{self.name}: expected a graph Value or an array, got {type(x).__name__}")

    def apply(self, op: str, inputs: Sequence[Any], name: str | None = None, **attrs: Any) -> list[Value]:
        """Add a node of op ``op`` (by name; ``g.relu(x)`` is the same as ``g.apply("relu", [x])[0]``); returns its outputs."""
        definition = get(op)
        like = next((x for x in inputs if isinstance(x, Value)), None)
        values = [self._as_value(x, like) for x in inputs]
        node_name = name or self._fresh(op)
        if node_name in self._node_names:
            raise GraphError(f"{self.name}: a node named {node_name!r} already exists")
        try:
            checked, out_types = definition.prepare([v.type for v in values], dict(attrs))
        except DeviceLayerError as exc:
            raise type(exc)(f"node {node_name!r} ({op}): {exc}") from exc
        outputs = [self._add_value(Value(f"{node_name}:{i}" if len(out_types) > 1 else node_name, t))
                   for i, t in enumerate(out_types)]
        node = Node(node_name, op, values, outputs, checked)
        for v in outputs:
            v.producer = node
        self.nodes.append(node)
        self._node_names.add(node_name)
        self.version += 1
        return outputs

    def output(self, name: str, value: Value) -> None:
        """Mark ``value`` as a graph output called ``name`` (returned to the host by plans)."""
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"output: the name must be a non-empty string, got {name!r}")
        if not isinstance(value, Value) or value.graph is not self:
            raise GraphError(f"output {name!r}: not a value of this graph")
        if name in self.outputs:
            raise GraphError(f"output {name!r} is already defined")
        self.outputs[name] = value
        self.version += 1

    def __getattr__(self, op: str) -> Any:
        if op.startswith("_") or op not in OPS:
            raise AttributeError(f"Graph has no attribute or op {op!r}")

        def build(*inputs: Any, name: str | None = None, **attrs: Any) -> Any:
            outs = self.apply(op, inputs, name=name, **attrs)
            return outs[0] if len(outs) == 1 else outs
        build.__name__ = op
        build.__doc__ = type(OPS[op]).__doc__
        return build

    # -- analysis ------------------------------------------------------------------------
    def order(self) -> list[Node]:
        """Nodes in a topological order (stable: ties keep insertion order); GraphError on a cycle."""
        producers = {id(v): n for n in self.nodes for v in n.outputs}
        deps = {id(n): {id(producers[id(v)]) for v in n.inputs if id(v) in producers} for n in self.nodes}
        done: set[int] = set()
        ordered: list[Node] = []
        pending = list(self.nodes)
        while pending:
            progress = False
            rest = []
            for n in pending:
                if deps[id(n)] <= done:
                    ordered.append(n)
                    done.add(id(n))
                    progress = True
                else:
                    rest.append(n)
            if not progress:
                raise GraphError(f"{self.name}: the graph has a cycle through {', '.join(n.name for n in rest[:5])}")
            pending = rest
        return ordered

    def needed(self) -> list[Node]:
        """Nodes the outputs depend on, in order (dead nodes dropped)."""
        if not self.outputs:
            raise GraphError(f"{self.name}: the graph has no outputs")
        live: set[int] = set()
        stack = list(self.outputs.values())
        while stack:
            v = stack.pop()
            if v.producer is not None and id(v.producer) not in live:
                live.add(id(v.producer))
                stack.extend(v.producer.inputs)
        return [n for n in self.order() if id(n) in live]

    def compile(self, devices: Any = "auto", placement: dict[str, Any] | None = None, strict: bool = False,
                policy: str = "fill", record: bool = True, constants: Any = None, fuse: bool = True,
                parallel: str = "model", timeout: float | None = None, allow_tf32: bool = False) -> Any:
        """Prepare an ExecutionPlan: placement (explicit ``placement`` wins), transfers, memory, kernels.

        ``devices`` is "auto" (every device, in preference order) or a list of ids/devices; ids of cluster
        nodes (``"<node>/<local id>"``, after ``devicelayer.cluster.connect()``) make a plan over the cluster.
        ``record`` replays each same-device run of nodes as one recorded submission (CUDA graph,
        one command buffer); ``record=False`` submits node by node.  ``constants`` (a
        ``graph.constants.ConstantStore``) shares the device copies of constants with other plans.  ``fuse``
        replaces decomposed LayerNorm/Softmax/GELU by their ops and chains of pointwise ops on one device by one
        kernel each (``graph/fuse.py``); ``fuse=False`` runs the graph node by node as written.
        ``allow_tf32`` lets float32 products and convolutions run TF32 on devices with such units (CUDA's tensor
        cores; about 1e-3 relative off IEEE float32; ``graph/precision.py``); off by default.
        Over a cluster only: ``parallel="model"`` splits the graph over the nodes (stages that overlap
        when several requests are in flight), ``"data"`` runs the whole graph on every node on a part of
        the batch; ``timeout`` bounds each run (seconds).
        """
        from ..registry import devices as every
        from . import remote
        from .plan import ExecutionPlan

        if placement is not None and not isinstance(placement, Mapping):
            raise InvalidArgument(f"compile: placement must map node names or op types to devices, "
                                  f"got {type(placement).__name__}")
        if not isinstance(strict, bool):
            raise InvalidArgument(f"compile: strict must be True or False, got {strict!r}")
        if parallel not in ("model", "data"):
            raise InvalidArgument(f"compile: parallel must be 'model' or 'data', got {parallel!r}")
        if isinstance(devices, str) and devices == "auto":
            chosen = every()
        elif isinstance(devices, (list, tuple)):
            chosen = [remote.resolve(d) for d in devices]
        else:
            chosen = [remote.resolve(devices)]
        if not chosen:
            raise GraphError("compile: no devices")
        if not isinstance(fuse, bool):
            raise InvalidArgument(f"compile: fuse must be True or False, got {fuse!r}")
        if not isinstance(allow_tf32, bool):
            raise InvalidArgument(f"compile: allow_tf32 must be True or False, got {allow_tf32!r}")
        if any(remote.is_remote(d) for d in chosen):
            if allow_tf32:
                raise InvalidArgument("compile: allow_tf32 is for plans of this machine's devices, not over a "
                                      "cluster")
            return remote.provider().compile(self, chosen, placement, strict, policy, record, constants, fuse,
                                             parallel, timeout)
        if parallel != "model":
            raise InvalidArgument("compile: parallel='data' splits a batch over cluster nodes; give devices of "
                                  "nodes (\"<node>/<local id>\", devicelayer.cluster.devices())")
        if timeout is not None:
            raise InvalidArgument("compile: timeout bounds the runs of a plan over a cluster; a plan of this "
                                  "machine's devices takes none")
        return ExecutionPlan(self, chosen, placement, strict, policy, record, constants, fuse, allow_tf32)

    def subgraph(self, nodes: Sequence[Node], exports: Sequence[Value], name: str | None = None) -> "Graph":
        """A graph of ``nodes`` (in order, names kept): a value they read that none of them makes becomes an
        input of its name (a constant stays a constant), and each of ``exports`` an output of its name."""
        sub = Graph(name or self.name)
        made: dict[int, Value] = {}
        inside = {id(v) for n in nodes for v in n.outputs}
        for n in nodes:
            for v in n.inputs:
                if id(v) in made or id(v) in inside:
                    continue
                if v.constant is not None:
                    made[id(v)] = sub._add_value(Value(v.name, v.type, constant=v.constant))
                else:
                    made[id(v)] = sub._add_value(Value(v.name, v.type))
                    sub.inputs.append(made[id(v)])
            outs = [sub._add_value(Value(v.name, v.type)) for v in n.outputs]
            copy = Node(n.name, n.op, [made[id(v)] for v in n.inputs], outs, dict(n.attrs))
            for old, new in zip(n.outputs, outs):
                new.producer = copy
                made[id(old)] = new
            sub.nodes.append(copy)
            sub._node_names.add(n.name)
        for v in exports:
            if id(v) not in made:
                raise GraphError(f"subgraph: {v.name!r} is neither made nor read by the nodes given")
            sub.outputs[v.name] = made[id(v)]
        sub.version += 1
        return sub

    def __repr__(self) -> str:
        return f"<Graph {self.name}: {len(self.nodes)} nodes, {len(self.inputs)} inputs, {len(self.outputs)} outputs>"


def consumers(nodes: Iterable[Node]) -> dict[int, list[Node]]:
    """For each value id, the nodes reading it."""
    out: dict[int, list[Node]] = {}
    for n in nodes:
        for v in n.inputs:
            out.setdefault(id(v), []).append(n)
    return out

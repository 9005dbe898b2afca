"""The conversion walk: ONNX nodes, in order, turned into library ops of a Graph for concrete input types.

A walk keeps every ONNX value in an environment: a NumPy constant (initializers,
Constant nodes, anything computed from constants alone, shapes of values), a
graph Value (computed on a device at run time), a list (an ONNX sequence) or
None (an empty optional).  A node whose inputs are all constants is evaluated
now; any other goes through its converter.

A converter may need the contents of a value computed at run time (a Reshape
target read from a tensor, an If condition) or a host computation on run-time
data (NonZero).  The walk then stops before that node and says so with a
``Cut``: the graph built so far is one segment of a plan, and the walk goes on
from the cut, in a new graph, once the segment has run and the values are
known (``devicelayer/onnx/model.py`` drives this).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..errors import DeviceLayerError, GraphError, UnsupportedOp
from ..graph.ir import Graph, Value

#: op types never folded even when their inputs are constant (not deterministic)
NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}
#: op types whose values are sequences or optionals: their converters handle constants (never folded into arrays)
SEQUENCE_OPS = {"SequenceEmpty", "SequenceConstruct", "SequenceLength", "SequenceAt", "SequenceInsert",
                "SequenceErase", "SplitToSequence", "ConcatFromSequence", "SequenceMap", "Optional",
                "OptionalHasElement", "OptionalGetElement"}
#: op types folded with no inputs at all
FOLD_WITHOUT_INPUTS = {"Constant", "ConstantOfShape", "Range", "EyeLike"}


class NeedValues(Exception):
    """Raised by a converter that needs the contents of values computed at run time (ONNX names)."""

    def __init__(self, names: Sequence[str], what: str) -> None:
        super().__init__(f"{what} needs the run-time values of {list(names)}")
        self.names = list(names)
        self.what = what


class NeedHost(Exception):
    """Raised by a converter whose outputs are computed on the host from run-time values (data-dependent
    output shapes): ``fn`` maps the NumPy values of ``names`` to the node's outputs."""

    def __init__(self, fn: Callable[[list[np.ndarray]], list[np.ndarray]], names: Sequence[str], what: str) -> None:
        super().__init__(f"{what} runs on the host on the run-time values of {list(names)}")
        self.fn, self.names, self.what = fn, list(names), what


class NeedDriver(Exception):
    """Raised by a converter whose node runs as a driver between segments (a loop over a sub-model, a branch
    chosen at run time): ``driver(values) -> outputs`` takes the node's inputs and the outer values its
    subgraphs read, as Tensors or arrays by name."""

    def __init__(self, driver: Any, names: Sequence[str], what: str) -> None:
        super().__init__(f"{what} runs as a driver over {list(names)}")
        self.driver, self.names, self.what = driver, list(names), what


@dataclass
class Cut:
    """Where a walk stopped: before node ``index``, because of ``reason`` (NeedValues, NeedHost or
    NeedDriver).  ``live`` are the names still needed from there on (the segment's outputs); ``constants``
    the live values known on the host."""

    index: int
    reason: NeedValues | NeedHost | NeedDriver
    live: list[str]
    constants: dict[str, Any] = field(default_factory=dict)


def subgraph_reads(graph: Any) -> set[str]:
    """Names a GraphProto (If branch, Loop/Scan body) reads from the scopes around it."""
    onnx_graph_type = type(graph)
    defined = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    reads: set[str] = set()
    for node in graph.node:
        for name in node.input:
            if name and name not in defined:
                reads.add(name)
        for a in node.attribute:
            subs = [a.g] if a.HasField("g") else list(a.graphs)
            for sub in subs:
                if isinstance(sub, onnx_graph_type):
                    reads |= {n for n in subgraph_reads(sub) if n not in defined}
        defined.update(o for o in node.output if o)
    return reads


def node_reads(node: Any) -> set[str]:
    """Names a node reads: its inputs and what its subgraphs read from outside."""
    reads = {n for n in node.input if n}
    for a in node.attribute:
        for sub in ([a.g] if a.HasField("g") else list(a.graphs)):
            reads |= subgraph_reads(sub)
    return reads


def unique_node_names(nodes: Sequence[Any], prefix: str = "") -> list[str]:
    """A unique name per node: its own, else ``<op type>_<index>``; repeats get ``_k`` (``prefix`` before)."""
    seen: dict[str, int] = {}
    names = []
    for i, n in enumerate(nodes):
        base = prefix + (n.name or f"{n.op_type}_{i}")
        k = seen.get(base, 0)
        seen[base] = k + 1
        names.append(base if k == 0 else f"{base}_{k}")
    return names


class Program:
    """A list of ONNX nodes to walk (a model's graph or a subgraph) with what each point still needs."""

    def __init__(self, nodes: Sequence[Any], outputs: Sequence[str], prefix: str = "") -> None:
        self.nodes = list(nodes)
        self.outputs = list(outputs)
        self.names = unique_node_names(self.nodes, prefix)
        # live[k]: names read by node k or later, or returned
        self.live: list[frozenset[str]] = [frozenset()] * (len(self.nodes) + 1)
        acc = set(self.outputs)
        self.live[len(self.nodes)] = frozenset(acc)
        for k in range(len(self.nodes) - 1, -1, -1):
            acc |= node_reads(self.nodes[k])
            self.live[k] = frozenset(acc)
        # used[k]: whether node k's outputs are read later (unused optional outputs need no converter support)
        self.used = [frozenset(o for o in n.output if o and o in self.live[k + 1]) for k, n in enumerate(self.nodes)]


def walk(ctx: Any, program: Program, start: int = 0, allow_cut: bool = True) -> Cut | None:
    """Convert ``program``'s nodes from ``start`` into ``ctx.graph``; a Cut where the walk had to stop (with
    ``allow_cut=False`` the need is refused as UnsupportedOp instead)."""
    from .converters import CONVERTERS
    from .loader import attributes

    for k in range(start, len(program.nodes)):
        node, node_name = program.nodes[k], program.names[k]
        ctx.node, ctx.node_name = node, node_name
        where = f"node {node_name!r} ({node.op_type})"
        try:
            for i, inp in enumerate(node.input):
                if inp and inp not in ctx.env:
                    raise GraphError(f"input {i} {inp!r} is produced by no node, initializer or graph input")
            if node.domain not in ("", "ai.onnx"):
                raise UnsupportedOp(f"op domain {node.domain!r} is not supported (only the default domain)")
            given = [ctx.env[n] for n in node.input if n]
            foldable = (all(isinstance(x, np.ndarray) for x in given) and node.op_type not in NO_FOLD
                        and node.op_type not in SEQUENCE_OPS
                        and (given or node.op_type in FOLD_WITHOUT_INPUTS)
                        and not any(a.HasField("g") or a.graphs for a in node.attribute))
            if not foldable and node.op_type in ("Shape", "Size") and given and isinstance(given[0], Value):
                foldable = True  # the shape of a value is known when the graph is specialised
            if foldable:
                outs = ctx.fold(node)
            else:
                conv = CONVERTERS.get(node.op_type)
                if conv is None:
                    raise UnsupportedOp(f"op type {node.op_type!r} is not supported")
                outs = list(conv(ctx, attributes(node)))
        except (NeedValues, NeedHost, NeedDriver) as need:
            if not allow_cut:
                raise UnsupportedOp(f"{where}: {need} (not possible here: a plan with one signature of "
                                    "input shapes and no run-time cuts was asked for)") from None
            live = sorted(n for n in program.live[k] if n in ctx.env)
            constants = {n: ctx.env[n] for n in live if not _has_value(ctx.env[n])}
            return Cut(k, need, live, constants)
        except UnsupportedOp as exc:
            msg = str(exc)
            raise UnsupportedOp(msg if msg.startswith("node ") else f"{where}: {msg}") from None
        except GraphError as exc:
            msg = str(exc)
            raise GraphError(msg if msg.startswith("node ") else f"{where}: {msg}") from None
        except DeviceLayerError as exc:  # an op refusing what the model asks of it: the model is malformed
            raise GraphError(f"{where}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - a converter's bug or a malformed model, named
            raise GraphError(f"{where}: cannot be converted: {type(exc).__name__}: {exc}") from None
        bind_outputs(ctx, node, outs, program.used[k], where)
    return None


def bind_outputs(ctx: Any, node: Any, outs: Sequence[Any], used: Any, where: str) -> None:
    """Name a node's results in the environment; an output the converter does not give is refused only when
    something reads it."""
    for k, out_name in enumerate(node.output):
        if not out_name:
            continue
        if k >= len(outs) or (outs[k] is None and not _optional(node, k)):
            if out_name in used:
                raise UnsupportedOp(f"{where}: output {k} ({out_name!r}) is not supported")
            continue
        ctx.env[out_name] = outs[k]


def _optional(node: Any, k: int) -> bool:
    """Whether output ``k`` of ``node`` may be an empty optional (None) by design (Optional ops)."""
    return node.op_type in ("Optional", "OptionalGetElement", "If", "Loop", "Identity")


def _has_value(x: Any) -> bool:
    """Whether an environment entry holds a graph Value (itself or inside a sequence)."""
    if isinstance(x, Value):
        return True
    if isinstance(x, list):
        return any(_has_value(e) for e in x)
    return False


def values_of(x: Any) -> list[Value]:
    """The graph Values an environment entry holds."""
    if isinstance(x, Value):
        return [x]
    if isinstance(x, list):
        return [v for e in x for v in values_of(e)]
    return []


def bind_inputs(graph: Graph, env: dict[str, Any], feeds: Mapping[str, Any], pinned: Mapping[str, np.ndarray]
                ) -> None:
    """Environment entries for a segment's inputs: pinned ones as constants, the others as graph inputs of
    the feeds' types (a sequence as one input per element, named ``name#i``)."""
    for name, x in feeds.items():
        if name in pinned:
            env[name] = pinned[name]
        elif x is None:
            env[name] = None
        elif isinstance(x, list):
            env[name] = [graph.input(f"{name}#{i}", e.shape, e.dtype) for i, e in enumerate(x)]
        else:
            env[name] = graph.input(name, x.shape, x.dtype)

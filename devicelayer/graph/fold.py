"""Folding per-channel affine maps into the conv or batch normalization before them, and ReLUs into both.

``fold_affine(graph)`` returns an equivalent graph where a ``batch_normalization``,
``mul`` or ``add`` with constant per-channel operands that follows a ``conv`` (or a
``batch_normalization``) with constant parameters, as that node's only reader, is
merged into it: conv weights and bias are rescaled, batch-normalization scale and
bias adjusted.  Inference runtimes do the same (ONNX Runtime's conv/BN fusion); it
removes a full pass over the tensor and a node per folded op on every device.
``fuse_activations(graph)`` moves a residual ``add`` and a ``relu`` that follow a
conv into it (its summand input Z and its ``activation`` attribute), and a ``relu``
that follows a batch normalization into that (its ``activation``).
"""

from __future__ import annotations

import numpy as np

from ..dtypes import computes_as_float
from .ir import Graph, Node, Value, consumers

#: ops that can absorb a following per-channel affine map
_ABSORBERS = ("conv", "batch_normalization")


def _channel_vector(v: Value, rank: int, channels: int) -> np.ndarray | None:
    """A constant operand that varies only along axis 1 of a rank-``rank`` tensor, as a (channels,) float64
    vector; None when it is not one."""
    c = v.constant
    if c is None or not computes_as_float(c.dtype) or c.ndim > rank:
        return None
    shape = (1,) * (rank - c.ndim) + c.shape
    if any(s != 1 for k, s in enumerate(shape) if k != 1) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(c.reshape(-1).astype(np.float64), (channels,))


def _affine(node: Node, x: Value) -> tuple[np.ndarray, np.ndarray] | None:
    """(a, b) with node(x) = x * a + b per channel (axis 1), when the node is such a map of ``x``."""
    if not x.shape or len(x.shape) < 2 or not computes_as_float(x.dtype) or node.outputs[0].dtype != x.dtype:
        return None
    rank, channels = len(x.shape), x.shape[1]
    if node.attrs.get("activation") is not None:  # an affine map then a ReLU is no longer affine
        return None
    if node.op == "batch_normalization" and node.inputs[0] is x:
        if any(v.constant is None or v.constant.shape != (channels,) for v in node.inputs[1:]):
            return None
        scale, bias, mean, var = (v.constant.astype(np.float64) for v in node.inputs[1:])
        a = scale / np.sqrt(var + node.attrs["epsilon"])
        return a, bias - mean * a
    if node.op in ("mul", "add") and len(node.inputs) == 2 and node.outputs[0].shape == x.shape:
        other = node.inputs[1] if node.inputs[0] is x else node.inputs[0]
        c = _channel_vector(other, rank, channels) if other is not x else None
        if c is None:
            return None
        return (c, np.zeros(channels)) if node.op == "mul" else (np.ones(channels), c)
    return None


def _absorb(node: Node, a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
    """The parameters (inputs after the first) of ``node`` once ``y * a + b`` is applied to its output ``y``."""
    consts = [v.constant for v in node.inputs[1:]]
    if node.op == "conv":
        w = consts[0]
        ct = np.promote_types(w.dtype, np.float32)  # the weights scaled in their own dtype (float16 in float32)
        bias = consts[1].astype(np.float64) if len(consts) > 1 else np.zeros(w.shape[0])
        scaled = w.astype(ct, copy=False) * a.astype(ct).reshape((-1,) + (1,) * (w.ndim - 1))
        return [scaled.astype(w.dtype, copy=False), (bias * a + b).astype(w.dtype)]
    scale, bias = (c.astype(np.float64) for c in consts[:2])
    return [(scale * a).astype(consts[0].dtype), (bias * a + b).astype(consts[1].dtype), *consts[2:]]


def fold_affine(graph: Graph) -> Graph:
    """An equivalent graph with per-channel affine maps folded into the conv / batch normalization before them."""
    nodes = graph.order()
    readers = consumers(nodes)
    outputs = {id(v) for v in graph.outputs.values()}
    merged: dict[int, tuple[list[np.ndarray], dict, Node, list]] = {}  # absorber -> (parameters, {}, last, [])
    skip: set[int] = set()
    for node in nodes:
        if (id(node) in skip or node.op not in _ABSORBERS or node.attrs.get("activation") is not None
                or (node.op == "conv" and len(node.inputs) > 3)
                or any(v.constant is None or not computes_as_float(v.dtype) for v in node.inputs[1:])):
            continue  # (an activation or a summand after the conv would not commute with the affine map)
        a = b = None
        last = node
        while True:  # compose the affine maps that follow, one reader at a time
            y = last.outputs[0]
            after = readers.get(id(y), [])
            ab = _affine(after[0], y) if len(after) == 1 and id(y) not in outputs else None
            if ab is None:
                break
            a, b = ab if a is None else (a * ab[0], b * ab[0] + ab[1])
            last = after[0]
            skip.add(id(last))
        if last is not node:
            merged[id(node)] = (_absorb(node, a, b), {}, last, [])
    if not merged:
        return graph
    return rebuild(graph, nodes, skip, merged)


def fuse_activations(graph: Graph) -> Graph:
    """An equivalent graph where what follows a conv, as the only reader of its output (not a graph output),
    moves into it: an ``add`` of a tensor of the conv output's shape (a residual connection) becomes the conv's
    summand input Z, and a ``relu`` after the conv (or after that add) its ``activation``.  A ``relu`` that alone
    reads a batch normalization becomes the normalization's ``activation``.  Each is a pass over the tensor
    and a node less, and vendor libraries fuse them (cuDNN's conv + bias + Z + ReLU)."""
    nodes = graph.order()
    readers = consumers(nodes)
    outputs = {id(v) for v in graph.outputs.values()}

    def only_reader(v: Value) -> Node | None:
        after = readers.get(id(v), [])
        return after[0] if len(after) == 1 and id(v) not in outputs else None

    changes: dict[int, tuple[list[np.ndarray] | None, dict, Node, list[Value]]] = {}
    skip: set[int] = set()
    moves: dict[int, Node] = {}  # conv id -> the node it is emitted before (its summand is made before that)
    for node in nodes:
        if node.op == "batch_normalization" and node.attrs.get("activation") is None:
            nxt = only_reader(node.outputs[0])
            if nxt is not None and nxt.op == "relu" and nxt.outputs[0].dtype == node.outputs[0].dtype:
                changes[id(node)] = (None, {"activation": "relu"}, nxt, [])
                skip.add(id(nxt))
            continue
        if node.op != "conv" or node.attrs.get("activation") is not None or len(node.inputs) > 3:
            continue
        y = node.outputs[0]
        last, extra, summand, params = node, {}, [], None
        nxt = only_reader(y)
        if (nxt is not None and nxt.op == "add" and len(nxt.inputs) == 2 and id(nxt) not in skip
                and nxt.outputs[0].shape == y.shape and nxt.outputs[0].dtype == y.dtype):
            other = nxt.inputs[1] if nxt.inputs[0] is y else nxt.inputs[0]
            if other is not y and other.shape == y.shape and other.dtype == y.dtype:
                if len(node.inputs) == 2:  # Z comes after B: a zero bias where the conv has none
                    params = [node.inputs[1].constant, np.zeros(y.shape[1], y.dtype)] \
                        if node.inputs[1].constant is not None else None
                    if params is None:
                        nxt = None
                if nxt is not None:
                    last, summand = nxt, [other]
                    moves[id(node)] = nxt
                    nxt = only_reader(nxt.outputs[0])
        if (nxt is not None and nxt.op == "relu" and nxt.inputs[0] is last.outputs[0]
                and nxt.outputs[0].dtype == y.dtype):
            last, extra = nxt, {"activation": "relu"}
        if last is node:
            moves.pop(id(node), None)
            continue
        changes[id(node)] = (params, extra, last, summand)
        skip.update(id(n) for n in (last, *([moves[id(node)]] if id(node) in moves else [])) if n is not node)
    if not changes:
        return graph
    order = [n for n in nodes if id(n) not in moves]
    for conv_id, before in moves.items():  # a conv with a summand runs where the add ran
        conv = next(n for n in nodes if id(n) == conv_id)
        order.insert(order.index(before), conv)
    return rebuild(graph, order, skip, changes)


def rebuild(graph: Graph, nodes: list[Node], skip: set[int],
            changes: dict[int, tuple[list[np.ndarray] | None, dict, Node, list[Value]]],
            ops: dict[int, tuple[str, dict]] | None = None) -> Graph:
    """A copy of ``graph`` without the ``skip`` nodes; a changed node (id -> (new constant parameters or None,
    extra attributes, last node it stands for, extra inputs)) takes the parameters, attributes and inputs and
    gives the outputs of the last node it stands for; a node in ``ops`` (id -> (op, attributes)) is made as
    that op instead."""
    new = Graph(graph.name)
    vmap: dict[int, Value] = {id(v): new.input(v.name, v.shape, v.dtype) for v in graph.inputs}
    kept = [n for n in nodes if id(n) not in skip]
    used = [v for n in kept for v in (n.inputs[:1] if changes.get(id(n), (None,))[0] is not None else n.inputs)]
    used += [v for n in kept for v in changes.get(id(n), (None, None, None, []))[3]]
    for v in used + list(graph.outputs.values()):
        if v.constant is not None and id(v) not in vmap:  # constants first, under their names
            vmap[id(v)] = new.constant(v.constant, name=v.name)
    for node in kept:
        inputs = [vmap.get(id(v)) for v in node.inputs]
        params, extra, last, more = changes.get(id(node), (None, {}, node, []))
        if params is not None:
            inputs[1:] = [new.constant(p) for p in params]
        inputs += [vmap[id(v)] for v in more]
        op, attrs = (ops or {}).get(id(node), (node.op, {**node.attrs, **extra}))
        outs = new.apply(op, inputs, name=node.name, **attrs)
        for old, out in zip(last.outputs, outs):
            vmap[id(old)] = out
    for name, v in graph.outputs.items():
        new.output(name, vmap[id(v)])
    return new

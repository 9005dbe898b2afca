"""GELU written out in elementwise ops (as PyTorch exports ``nn.GELU``) as one ``gelu`` node.

``fuse_gelu(graph)`` finds ``x / sqrt(2)`` (or ``x * (1/sqrt(2))``), ``erf`` of it, ``+ 1``, and the product
of that with ``x`` and ``0.5`` in either order (``(x * e) * 0.5``, ``(e * 0.5) * x`` or ``(x * 0.5) * e``),
each intermediate read by the next alone and none a graph output, and puts one ``gelu`` in their place:
one op where there were five passes over the tensor (and one a device can run as a library's activation,
oneDNN's eltwise GELU on the host).  ONNX Runtime fuses the same chain.
"""

from __future__ import annotations

import math

from .fold import rebuild
from .ir import Graph, Node, Value, consumers

_SQRT2 = math.sqrt(2.0)


def _scalar(v: Value, want: float) -> bool:
    """Whether ``v`` is a one-element float constant equal to ``want`` (to float32 precision)."""
    c = v.constant
    return c is not None and c.size == 1 and c.dtype.kind == "f" and abs(float(c.reshape(-1)[0]) - want) <= 1e-6 * want


def _other(node: Node, v: Value) -> Value | None:
    """The input of the two-input ``node`` that is not ``v`` (None where ``v`` is not one of them)."""
    a, b = node.inputs
    return b if a is v else a if b is v else None


def fuse_gelu(graph: Graph) -> Graph:
    """An equivalent graph with every erf-form GELU chain as one ``gelu`` node."""
    nodes = graph.order()
    readers = consumers(nodes)
    outputs = {id(v) for v in graph.outputs.values()}
    producer = {id(v): n for n in nodes for v in n.outputs}

    def only_reader(node: Node, op: str) -> Node | None:
        v = node.outputs[0]
        after = readers.get(id(v), [])
        ok = len(after) == 1 and id(v) not in outputs and after[0].op == op and len(after[0].inputs) <= 2
        return after[0] if ok else None

    skip: set[int] = set()
    changes: dict = {}
    ops: dict[int, tuple[str, dict]] = {}
    for scale in nodes:
        if id(scale) in skip or len(scale.inputs) != 2 or not (
                (scale.op == "div" and _scalar(scale.inputs[1], _SQRT2))
                or (scale.op == "mul" and _scalar(scale.inputs[1], 1 / _SQRT2))):
            continue
        x = scale.inputs[0]
        if x.dtype.kind != "f" or x.constant is not None:
            continue
        erf = only_reader(scale, "erf")
        plus = only_reader(erf, "add") if erf is not None else None
        if plus is None or not _scalar(_other(plus, erf.outputs[0]), 1.0):
            continue
        e = plus.outputs[0]
        first = only_reader(plus, "mul")
        if first is None:
            continue
        partner = _other(first, e)
        last, extra = None, []
        if partner is x or (partner is not None and _scalar(partner, 0.5)):  # (x * e) * 0.5 or (e * 0.5) * x
            last = only_reader(first, "mul")
            want = x if partner is not x else None
            third = _other(last, first.outputs[0]) if last is not None else None
            if third is None or not (third is x if want is x else _scalar(third, 0.5)):
                last = None
        elif partner is not None and id(partner) in producer:  # (x * 0.5) * e
            half = producer[id(partner)]
            if half.op == "mul" and len(half.inputs) == 2 and readers.get(id(partner)) == [first] \
                    and id(partner) not in outputs and _other(half, x) is not None and _scalar(_other(half, x), 0.5):
                last, extra = first, [half]
        if last is None or last.outputs[0].shape != x.shape or last.outputs[0].dtype != x.dtype:
            continue
        changes[id(scale)] = ([], {}, last, [])
        ops[id(scale)] = ("gelu", {})
        skip.update(id(n) for n in (erf, plus, first, last, *extra) if n is not scale)
    return rebuild(graph, nodes, skip, changes, ops) if ops else graph

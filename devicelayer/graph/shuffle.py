"""ShuffleNet's channel shuffle (reshape, transpose, reshape) as one ``channel_shuffle`` node.

``fuse_channel_shuffles(graph)`` finds a reshape of (N, C, ...) to
(N, g, C/g, ...), a transpose swapping those two dims, and a reshape back to
(N, C, ...), each the only reader of the one before and none a graph output,
and puts one ``channel_shuffle(group=g)`` in their place: one op instead of a
copy between two views, and one a device can run in its own layout (oneDNN's
shuffle on channels-last tensors on the host).
"""

from __future__ import annotations

from .fold import rebuild
from .ir import Graph, Node, consumers


def _shuffle_group(first: Node, transpose: Node, last: Node) -> int | None:
    """The group of the channel shuffle these three nodes make, else None."""
    x, mid = first.inputs[0], first.outputs[0]
    if first.op != "reshape" or transpose.op != "transpose" or last.op != "reshape":
        return None
    shape, split = x.shape, mid.shape
    rank = len(shape)
    if rank < 2 or len(split) != rank + 1 or any(not isinstance(d, int) for d in (*shape, *split)):
        return None
    n, c, rest = shape[0], shape[1], tuple(shape[2:])
    group = split[1]
    if split[0] != n or group < 1 or group * split[2] != c or tuple(split[3:]) != rest:
        return None
    if tuple(transpose.attrs.get("perm", ())) != (0, 2, 1, *range(3, rank + 1)):
        return None
    return group if tuple(last.outputs[0].shape) == tuple(shape) else None


def fuse_channel_shuffles(graph: Graph) -> Graph:
    """An equivalent graph with every reshape-transpose-reshape channel shuffle as one ``channel_shuffle``."""
    nodes = graph.order()
    readers = consumers(nodes)
    outputs = {id(v) for v in graph.outputs.values()}

    def only_reader(node: Node) -> Node | None:
        v = node.outputs[0]
        after = readers.get(id(v), [])
        return after[0] if len(after) == 1 and id(v) not in outputs else None

    skip: set[int] = set()
    changes: dict = {}
    ops: dict[int, tuple[str, dict]] = {}
    for node in nodes:
        if node.op != "reshape" or id(node) in skip:
            continue
        transpose = only_reader(node)
        last = only_reader(transpose) if transpose is not None else None
        if last is None:
            continue
        group = _shuffle_group(node, transpose, last)
        if group is None:
            continue
        changes[id(node)] = (None, {}, last, [])
        ops[id(node)] = ("channel_shuffle", {"group": group})
        skip.update((id(transpose), id(last)))
    return rebuild(graph, nodes, skip, changes, ops) if ops else graph

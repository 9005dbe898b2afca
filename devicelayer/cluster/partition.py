"""Cutting a placed graph into parts, one per stretch of a node's work: what each part reads and exports.

Parts follow the placement by node.  A part's level is one more than the
highest level of another node's part it reads from (the same level where it
reads only from its own node), so parts form a chain of levels and never a
cycle: a node whose work comes back after another node's has two parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..graph.ir import Graph, Node, Value


@dataclass
class Part:
    """The nodes one node runs at one level, the values it reads from outside and those it exports."""

    index: int
    node: str  # the cluster node's name
    level: int
    nodes: list[Node] = field(default_factory=list)
    inputs: list[Value] = field(default_factory=list)  # graph inputs or values of other parts, in a stable order
    exports: list[Value] = field(default_factory=list)  # values other parts read, and graph outputs it makes

    @property
    def first(self) -> str:
        """The name of the part's first graph node."""
        return self.nodes[0].name


def partition(graph: Graph, nodes: Sequence[Node], node_of: Mapping[int, str]) -> list[Part]:
    """``nodes`` (in execution order) cut into parts by ``node_of`` (graph node id -> cluster node name), parts
    in an order every part comes after the parts it reads."""
    producer = {id(v): n for n in nodes for v in n.outputs}
    position = {id(n): i for i, n in enumerate(nodes)}
    part_of: dict[int, tuple[str, int]] = {}
    members: dict[tuple[str, int], list[Node]] = {}
    for n in nodes:
        where = node_of[id(n)]
        level = 0
        for v in n.inputs:
            p = producer.get(id(v))
            if p is not None:
                src, src_level = part_of[id(p)]
                level = max(level, src_level + (src != where))
        part_of[id(n)] = (where, level)
        members.setdefault((where, level), []).append(n)
    keys = sorted(members, key=lambda k: (k[1], position[id(members[k][0])]))
    parts = [Part(i, k[0], k[1], members[k]) for i, k in enumerate(keys)]
    index = {k: i for i, k in enumerate(keys)}
    outputs = {id(v) for v in graph.outputs.values()}
    exported: dict[int, set[int]] = {}
    for part in parts:
        seen: set[int] = set()
        inside = {id(v) for n in part.nodes for v in n.outputs}
        for n in part.nodes:
            for v in n.inputs:
                if v.constant is not None or id(v) in inside or id(v) in seen:
                    continue
                seen.add(id(v))
                part.inputs.append(v)
                p = producer.get(id(v))
                if p is not None:
                    exported.setdefault(index[part_of[id(p)]], set()).add(id(v))
    for part in parts:
        wanted = exported.get(part.index, set())
        part.exports = [v for n in part.nodes for v in n.outputs if id(v) in wanted or id(v) in outputs]
    return parts


def producers(parts: Sequence[Part]) -> dict[int, Part]:
    """Value id -> the part exporting it."""
    return {id(v): p for p in parts for v in p.exports}


def subgraph(graph: Graph, part: Part, name: Any) -> Graph:
    """The Graph a node compiles for ``part``."""
    return graph.subgraph(part.nodes, part.exports, name=str(name))

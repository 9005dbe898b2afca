"""Fusion at compile time: a placed graph with fewer kernel launches.

``fuse_graph`` places the graph as compiling would, then
1. replaces decomposed LayerNorm, Softmax and GELU forms by the library's one op (``patterns``) where that op
   runs on the device the pattern's nodes were placed on, and
2. groups pointwise nodes (``kernels.ops.fused.fusable``) placed on one device, with one output shape, into one
   ``fused_elementwise`` node each (on a GPU a short group of a smaller shape that broadcasts into a node joins
   that node's group, its steps computed again per element: ``_recomputed``): a node joins the groups of its
   operands' producers where the merged group stays acyclic (no path leaves it and comes back) and the fused
   kernel runs on the device (every member's ``unsupported``, the kernel's own limits).  A member whose result
   is read outside the group, or is a graph output, is written as an extra output of the fused node.
3. makes a group (or one fusable node, or a pointwise pattern) that alone reads a matmul's or gemm's result,
   directly or through a reshape, that product's epilogue (``epilogues``): one kernel computes both.
The result is an equivalent graph and a ``Fusion``: each group with its members and the kernel launches they
took alone, and the device each new node is pinned to.  Nodes the caller placed by name or op type are left
alone.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..device import Device
from ..errors import DeviceLayerError
from ..kernels.op import Alias, TensorType, get
from ..kernels.ops.fused import fusable
from ..kernels.runner import plan_for
from . import epilogues, patterns
from .ir import Graph, Node, Value, consumers
from .placement import Placement, place

#: steps a group of a smaller shape may hold to join the larger chain it broadcasts into (``_recomputed``)
RECOMPUTED_STEPS = 4


@dataclass
class FusedGroup:
    """One node of the fused graph standing for several of the graph as written."""

    node: str
    kind: str  # "elementwise" or the op a pattern became
    device: str
    members: list[tuple[str, str]]  # (node, op) of the graph as written
    launches: int  # kernel launches of the members alone, per run


@dataclass
class Fusion:
    """What ``fuse_graph`` did: the groups, and the device each new node is pinned to."""

    groups: list[FusedGroup] = field(default_factory=list)
    pinned: dict[str, Device] = field(default_factory=dict)

    def by_node(self) -> dict[str, FusedGroup]:
        return {g.node: g for g in self.groups}


def launches(op_plan: Any, copies: int = 0) -> int:
    """Kernel launches (vendor-library calls and host tasks included) of an op's plan per run."""
    return sum(1 for s in op_plan.steps if not isinstance(s, Alias)) + copies


def _types(graph: Graph, nodes: Sequence[Node]) -> dict[int, TensorType]:
    from .plan import infer_types  # (plan imports this module)

    return infer_types(graph, nodes, {v.name: v.type for v in graph.inputs})


def fuse_graph(graph: Graph, devices: Sequence[Device], explicit: Mapping[str, Any] | None, strict: bool,
               policy: str, elementwise: bool = True, use_patterns: bool = True) -> tuple[Graph, Fusion | None]:
    """The graph with patterns and pointwise chains fused for this placement (see the module); the graph itself
    and None where nothing fuses."""
    nodes = graph.needed()
    if len(nodes) < 2:
        return graph, None
    types = _types(graph, nodes)
    placement = place(graph, nodes, types, devices, explicit, strict, policy)
    asked = set(explicit or {})
    excluded = {id(n) for n in nodes if n.name in asked or n.op in asked}
    outputs = {id(v) for v in graph.outputs.values()}
    readers = consumers(nodes)
    found: list[patterns.Replacement] = []
    if use_patterns:
        found = patterns.find(nodes, types, outputs, readers, placement.of, excluded)
    taken = excluded | {id(m) for r in found for m in r.members}
    if elementwise:
        found = _elementwise_around(nodes, found, types, outputs, placement, taken)
        found = epilogues.attach(nodes, types, outputs, readers, placement, taken, found)
    if not found:
        return graph, None
    fusion = Fusion()
    names = {n.name for n in graph.nodes}
    bound = outputs | {id(v) for v in graph.inputs} | {id(v) for v in graph.values.values() if v.constant is not None}
    for r in found:
        name = _name(r, names)
        names.add(name)
        r.extra["name"] = name
        fusion.pinned[name] = r.device
        views = [f"in{j}" for j in r.extra.get("input_shapes", {}) if r.inputs[j].constant is None]
        views += ["out"] if "output_shape" in r.extra else []
        for which in views:  # (the reshapes around a product whose epilogue was read through a view)
            view = _unique(f"{name}:{which}", names)
            names.add(view)
            r.extra[f"name:{which}"] = view
            fusion.pinned[view] = r.device
        fusion.groups.append(FusedGroup(name, r.kind, r.device.id, [(m.name, m.op) for m in r.members],
                                        sum(_alone(m, r.device, types, bound) for m in r.members)))
    return contract(graph, nodes, found), fusion


def _alone(node: Node, device: Device, types: Mapping[int, TensorType], bound: set[int]) -> int:
    """Kernel launches ``node`` takes per run on ``device`` on its own (an alias of a value ``bound`` per run
    or uploaded apart, a graph input, output or constant, is a copy, as plans make it)."""
    try:
        plan = plan_for(get(node.op), device, [types[id(v)] for v in node.inputs],
                        [types[id(v)] for v in node.outputs], node.attrs)
    except DeviceLayerError:
        return 1
    copies = sum(1 for a in plan.steps if isinstance(a, Alias)
                 and (id(node.inputs[a.input]) in bound or id(node.outputs[a.output]) in bound))
    return launches(plan, copies)


def _name(r: patterns.Replacement, taken: set[str]) -> str:
    """A node name for a replacement: its members' names (the first and last of more than four)."""
    names = [m.name for m in r.members]
    return _unique(f"{r.kind}({', '.join(names)})" if len(names) <= 4 else f"{r.kind}({names[0]}..{names[-1]})",
                   taken)


def _unique(base: str, taken: set[str]) -> str:
    name, k = base, 1
    while name in taken:
        name, k = f"{base}#{k}", k + 1
    return name


# -- pointwise chains ---------------------------------------------------------------------------------------------
def _elementwise_around(nodes: list[Node], found: list, types: Mapping[int, TensorType], outputs: set[int],
                        placement: Placement, taken: set[int]) -> list:
    """``found`` (the patterns) with the pointwise groups added: on a kernel device a pattern whose op is pointwise
    (GELU) takes part as one node standing in for its members, so that the chain around it fuses with it (a
    product's bias, GELU and the layer scale: one kernel); a group holding one is the group of all their
    members."""
    position = {id(n): i for i, n in enumerate(nodes)}
    stand_in: dict[int, Any] = {}  # stand-in node id -> the pattern
    at_top: dict[int, Node] = {}  # the id of a pointwise pattern's last member (it writes the result) -> stand-in
    for r in found:  # (the host runs such a pattern's op as one oneDNN call: a chain would take it to NumPy)
        if fusable(r.op) and len(r.outputs) == 1 and r.device.info.kernel_language != "python":
            node = Node(f"{r.kind}#{len(stand_in)}", r.op, list(r.inputs), list(r.outputs), dict(r.attrs))
            stand_in[id(node)] = r
            at_top[id(max(r.members, key=lambda m: position[id(m)]))] = node
    inside = {id(m) for r in stand_in.values() for m in r.members}
    units = [at_top.get(id(n), n) for n in nodes if id(n) in at_top or id(n) not in inside]
    # (a node reading a product's result stays out of a stand-in's group: alone, or with what it joins otherwise,
    # it may become the product's epilogue, which a vendor library applies in the product's own call)
    products = {id(v) for n in nodes if n.op in epilogues.PRODUCERS for v in n.outputs}
    for n in nodes:  # (and a view of one: the product's epilogue is read through it)
        if n.op in epilogues.VIEWS and id(n.inputs[0]) in products:
            products.add(id(n.outputs[0]))
    anchored = {id(n) for n in units if any(id(v) in products for v in n.inputs)}

    def allowed(members: list[Node]) -> bool:
        ids = {id(m) for m in members}
        return not (ids & anchored and any(i in stand_in for i in ids))

    groups = _elementwise(units, types, outputs, consumers(units),
                          lambda n: stand_in[id(n)].device if id(n) in stand_in else placement.of(n), taken,
                          allowed)
    absorbed: set[int] = set()  # ids of the patterns a group took in
    for g in groups:
        if any(id(u) in stand_in for u in g.members):
            absorbed.update(id(stand_in[id(u)]) for u in g.members if id(u) in stand_in)
            g.members = [m for u in g.members for m in (stand_in[id(u)].members if id(u) in stand_in else [u])]
    return [r for r in found if id(r) not in absorbed] + groups


def _elementwise(nodes: list[Node], types: Mapping[int, TensorType], outputs: set[int],
                 readers: Mapping[int, list[Node]], device_of: Any, taken: set[int],
                 allowed: Any = lambda members: True) -> list:
    """Groups of two or more pointwise nodes as fused_elementwise replacements (``device_of(node)``: where it was
    placed; ``allowed(members)``: whether a group may be formed)."""
    index = {id(n): i for i, n in enumerate(nodes)}
    producer = {id(v): n for n in nodes for v in n.outputs}
    group_of: dict[int, list[Node]] = {}
    shape_of: dict[int, tuple[int, ...]] = {}  # id of a group -> the shape its kernel computes
    for node in nodes:
        if (id(node) in taken or len(node.outputs) != 1 or not fusable(node.op)
                or types[id(node.outputs[0])].size == 0):
            continue
        dev = device_of(node)
        shape = types[id(node.outputs[0])].shape
        near: list[list[Node]] = []
        for v in node.inputs:
            group = group_of.get(id(producer[id(v)])) if id(v) in producer else None
            if (group is not None and all(group is not g for g in near) and device_of(group[0]) is dev
                    and (shape_of[id(group)] == shape or _recomputed(group, shape_of[id(group)], shape, dev))):
                near.append(group)
        options = ([near] if len(near) > 1 else []) + [[g] for g in near]
        joined = [node]
        for option in options:
            members = sorted({id(m): m for g in option for m in (*g, node)}.values(), key=lambda m: index[id(m)])
            if (allowed(members) and _acyclic(members, index, producer)
                    and _describe(members, types, outputs, readers, dev) is not None):
                joined = members
                break
        for m in joined:
            group_of[id(m)] = joined
        shape_of[id(joined)] = shape
    found = []
    seen: set[int] = set()
    for node in nodes:
        group = group_of.get(id(node))
        if group is None or id(group) in seen or len(group) < 2:
            continue
        seen.add(id(group))
        dev = device_of(group[0])
        r = _describe(group, types, outputs, readers, dev)
        if r is not None:
            found.append(r)
    return found


def recomputes(device: Device) -> bool:
    """Whether ``device`` computes a short broadcast chain again for every element sooner than it moves the large
    tensor once more: a GPU.  A CPU's drivers pay for the transcendentals instead (a sigmoid gate over
    (8, 96, 56, 56) float32 on PoCL: 2.9 ms as two kernels, 8.1 ms as one)."""
    return device.info.device_type == "gpu" and device.info.kernel_language != "python"


def _recomputed(group: list[Node], small: tuple[int, ...], shape: tuple[int, ...], device: Device) -> bool:
    """Whether a group computing ``small`` may join a node of the larger ``shape`` it broadcasts into, each of its
    steps then computed again for every element of ``shape`` (a squeeze-and-excitation gate's sigmoid inside the
    product it scales: one kernel, where two would move the large tensor): on a device that ``recomputes``, for a
    group of at most ``RECOMPUTED_STEPS`` steps.  (Only a group whose results are read inside the merged group
    alone can join: ``_describe`` refuses outputs of another shape.)"""
    if not recomputes(device) or len(group) > RECOMPUTED_STEPS or len(small) > len(shape):
        return False
    lead = (1,) * (len(shape) - len(small)) + tuple(small)
    return all(a in (1, b) for a, b in zip(lead, shape))


def _acyclic(members: list[Node], index: Mapping[int, int], producer: Mapping[int, Node]) -> bool:
    """Whether no path leaves ``members`` and comes back to them (their producers searched back to the first;
    ``producer``: each value's producing node by value id)."""
    ids = {id(m) for m in members}
    start = min(index[i] for i in ids)
    before = [producer.get(id(v)) for m in members for v in m.inputs]
    stack = [p for p in before if p is not None and id(p) not in ids and index.get(id(p), -1) > start]
    seen: set[int] = set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        for v in n.inputs:
            p = producer.get(id(v))
            if p is None or index.get(id(p), -1) < start:
                continue
            if id(p) in ids:
                return False
            stack.append(p)
    return True


def _describe(members: list[Node], types: Mapping[int, TensorType], outputs: set[int],
              readers: Mapping[int, list[Node]], device: Device) -> patterns.Replacement | None:
    """The fused_elementwise replacement of ``members`` (in order) on ``device``; None where it cannot run there."""
    ids = {id(m) for m in members}
    made = {id(m.outputs[0]): k for k, m in enumerate(members)}
    inputs: list[Value] = []
    for m in members:
        for v in m.inputs:
            if id(v) not in made and all(v is not u for u in inputs):
                inputs.append(v)
    slot = {id(v): j for j, v in enumerate(inputs)}
    steps = []
    for m in members:
        operands = tuple(slot[id(v)] if id(v) in slot else len(inputs) + made[id(v)] for v in m.inputs)
        steps.append((m.op, dict(m.attrs), operands))
    written = [k for k, m in enumerate(members) if id(m.outputs[0]) in outputs
               or any(id(r) not in ids for r in readers.get(id(m.outputs[0]), []))]
    if not written:
        return None
    op = get("fused_elementwise")
    in_types = [types[id(v)] for v in inputs]
    try:
        attrs, _ = op.prepare(in_types, {"steps": tuple(steps), "outputs": tuple(written)})
    except DeviceLayerError:
        return None
    if op.unsupported(in_types, attrs, device.info) is not None:
        return None
    return patterns.Replacement("elementwise", list(members), "fused_elementwise", attrs, inputs,
                                [members[k].outputs[0] for k in written], device)


# -- the new graph ------------------------------------------------------------------------------------------------
def contract(graph: Graph, nodes: list[Node], replacements: Sequence[patterns.Replacement]) -> Graph:
    """A copy of ``graph`` (its ``nodes``) with each replacement's members made one node, in a topological order."""
    index = {id(n): i for i, n in enumerate(nodes)}
    unit_of: dict[int, Any] = {id(n): n for n in nodes}
    for r in replacements:
        for m in r.members:
            unit_of[id(m)] = r
    units = list({id(u): u for u in unit_of.values()}.values())

    producer = {id(v): unit_of[id(n)] for n in nodes for v in n.outputs}
    waiting = {id(u): len({id(producer[id(v)]) for v in u.inputs if id(v) in producer}) for u in units}
    after: dict[int, list[Any]] = {}
    for u in units:
        for p in {id(producer[id(v)]): producer[id(v)] for v in u.inputs if id(v) in producer}.values():
            after.setdefault(id(p), []).append(u)

    def rank(u: Any) -> int:
        return min(index[id(m)] for m in u.members) if isinstance(u, patterns.Replacement) else index[id(u)]

    ready = [(rank(u), id(u), u) for u in units if not waiting[id(u)]]
    heapq.heapify(ready)
    new = Graph(graph.name)
    vmap: dict[int, Value] = {id(v): new.input(v.name, v.shape, v.dtype) for v in graph.inputs}

    def value(v: Value) -> Value:
        if id(v) not in vmap and v.constant is not None:  # (a constant a pattern made may need a fresh name)
            name = v.name if v.graph is graph or v.name not in new.values else None
            vmap[id(v)] = new.constant(v.constant, name=name)
        return vmap[id(v)]

    done = 0
    while ready:
        _, _, u = heapq.heappop(ready)
        done += 1
        name = u.extra["name"] if isinstance(u, patterns.Replacement) else u.name
        ins = [value(v) for v in u.inputs]
        extra = u.extra if isinstance(u, patterns.Replacement) else {}
        for j, shape in extra.get("input_shapes", {}).items():  # (an operand given the product's shape)
            old = u.inputs[j]
            ins[j] = (new.constant(old.constant.reshape(shape)) if old.constant is not None else
                      new.apply("reshape", [ins[j]], name=extra[f"name:in{j}"], shape=tuple(shape))[0])
        outs = new.apply(u.op, ins, name=name, **u.attrs)
        if "output_shape" in extra:  # (the result as the view the chain read it through had it)
            outs = new.apply("reshape", outs, name=extra["name:out"], shape=tuple(extra["output_shape"]))
        for old, out in zip(u.outputs, outs):
            vmap[id(old)] = out
        for w in after.get(id(u), []):
            waiting[id(w)] -= 1
            if not waiting[id(w)]:
                heapq.heappush(ready, (rank(w), id(w), w))
    if done != len(units):
        raise AssertionError("fusion made a cycle")  # _acyclic and the patterns' checks rule this out
    for name, v in graph.outputs.items():
        new.output(name, value(v))
    return new


def annotate(placement: Placement, fusion: Fusion | None) -> None:
    """Say in ``placement``'s reasons which nodes stand for fused groups."""
    if fusion is None:
        return
    groups = fusion.by_node()
    for n in placement.nodes:
        g = groups.get(n.name)
        if g is not None:
            ops = ", ".join(op for _, op in g.members)
            placement.reason[id(n)] = f"fused {g.kind} of {len(g.members)} nodes ({ops}), placed as they were"


def kernel_counts(steps: Sequence[Any], fusion: Fusion | None) -> dict[str, int]:
    """Kernel launches per run of a prepared plan's ``steps``: ``after`` fusion and ``before`` (the fused nodes'
    members counted as they ran alone)."""
    groups = fusion.by_node() if fusion is not None else {}
    after = before = 0
    for s in steps:
        if s.kind != "node":
            continue
        n = launches(s.op_plan, len(s.copies))
        after += n
        g = groups.get(s.node.name)
        before += g.launches if g is not None else n
    return {"before": before, "after": after}


def report_lines(steps: Sequence[Any], fusion: Fusion | None) -> list[str]:
    """Lines for the placement report: launches before and after fusion, then each group fused."""
    counts = kernel_counts(steps, fusion)
    if fusion is None:
        return [f"{counts['after']} kernel launch(es) per run (nothing fused)"]
    lines = [f"{counts['after']} kernel launch(es) per run after fusion, {counts['before']} before; "
             f"{len(fusion.groups)} group(s) fused:"]
    for g in fusion.groups:
        members = ", ".join(f"{n} ({op})" for n, op in g.members)
        lines.append(f"  {g.node} on {g.device}: {members}")
    return lines


__all__ = ["Fusion", "FusedGroup", "fuse_graph", "contract", "annotate", "kernel_counts", "report_lines",
           "launches"]

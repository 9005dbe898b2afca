"""Placement: which device runs each node, and why (capability- and memory-aware, explicit wins)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..device import Device
from ..errors import DeviceLayerError, GraphError
from ..kernels.op import TensorType, get
from .ir import Graph, Node, consumers


@dataclass
class Placement:
    """Device and reason per node, in execution order."""

    nodes: list[Node]
    device: dict[int, Device] = field(default_factory=dict)
    reason: dict[int, str] = field(default_factory=dict)

    def of(self, node: Node) -> Device:
        return self.device[id(node)]


def _why_not(node: Node, types: Mapping[int, TensorType], device: Device) -> str | None:
    op = get(node.op)
    why = op.unsupported([types[id(v)] for v in node.inputs], node.attrs, device.info)
    if why is None:
        for v in node.outputs:
            t = types[id(v)]
            if t.dtype.name not in device.info.dtypes:
                return f"{device.id} has no {t.dtype.name}"
        for v in [*node.inputs, *node.outputs]:
            if _bytes(types[id(v)]) > device.info.max_allocation:
                return (f"{v.name} needs a {_bytes(types[id(v)])}-byte buffer; {device.id} allows at most "
                        f"{device.info.max_allocation}")
    return why


def _bytes(t: TensorType) -> int:
    return t.size * t.dtype.itemsize


def place(graph: Graph, nodes: Sequence[Node], types: Mapping[int, TensorType], devices: Sequence[Device],
          explicit: Mapping[str, str | Device] | None = None, strict: bool = False,
          policy: str = "fill") -> Placement:
    """Place ``nodes`` on ``devices`` (in preference order).

    ``explicit`` maps a node name or an op type to a device id; it wins.
    ``policy="fill"`` fills the first capable device until its memory is spent,
    then the next (vkml's greedy pass), keeping a chain where its input is;
    ``"spread"`` sends independent branches to different devices.
    ``strict=True`` refuses any node that cannot run where it was asked, or on
    the first device, instead of falling back.
    """
    from ..registry import device as find

    if not devices:
        raise GraphError("compile: no devices to place the graph on")
    if policy not in ("fill", "spread"):
        raise GraphError(f"compile: placement policy must be 'fill' or 'spread', got {policy!r}")
    asked = {}
    for key, dev in (explicit or {}).items():
        try:
            asked[key] = find(dev)
        except DeviceLayerError as exc:
            raise type(exc)(f"placement for {key!r}: {exc}") from exc
        if asked[key] not in devices:
            raise GraphError(f"placement puts {key!r} on {asked[key].id}, which is not one of the devices the "
                             f"graph is compiled for ({', '.join(d.id for d in devices)})")
    known = {n.name for n in graph.nodes} | {n.op for n in graph.nodes}
    unknown = sorted(k for k in asked if k not in known)
    if unknown:
        raise GraphError(f"placement names no node or op of the graph: {unknown}")
    budget = {id(d): int(d.pool.free_bytes * 0.9) for d in devices}
    load = {id(d): 0 for d in devices}
    readers = consumers(nodes)
    result = Placement(list(nodes))
    for node in nodes:
        need = sum(_bytes(types[id(v)]) for v in node.outputs)
        target = asked.get(node.name) or asked.get(node.op)
        if target is not None:
            why = _why_not(node, types, target)
            if why is None:
                result.device[id(node)] = target
                result.reason[id(node)] = "placed there by placement="
                budget[id(target)] = budget.get(id(target), 0) - need
                continue
            if strict:
                raise GraphError(f"node {node.name!r} ({node.op}) cannot run on {target.id} as asked: {why}")
            fallback = f"asked for {target.id}, but {why}; "
        else:
            fallback = ""
        refusals = []
        capable = []
        for d in devices:
            why = _why_not(node, types, d)
            if why is None:
                capable.append(d)
            else:
                refusals.append(why)
        if not capable:
            raise GraphError(f"node {node.name!r} ({node.op}) runs on none of the devices: {'; '.join(refusals)}")
        if strict and target is None and capable[0] is not devices[0]:
            raise GraphError(f"node {node.name!r} ({node.op}) cannot run on {devices[0].id}: {refusals[0]} "
                             f"(strict=True refuses to fall back)")
        homes = [result.device[id(v.producer)] for v in node.inputs if v.producer is not None]
        chosen, reason = None, ""
        if policy == "spread" and (not homes or any(len(readers.get(id(v), ())) > 1 for v in node.inputs)):
            chosen = min(capable, key=lambda d: (load[id(d)], devices.index(d)))
            reason = "least-loaded capable device (independent branch)"
        elif homes and homes[-1] in capable and budget[id(homes[-1])] >= need:
            chosen = homes[-1]
            reason = "follows its input (no transfer)"
        if chosen is None:
            for d in capable:
                if budget[id(d)] >= need:
                    chosen = d
                    skipped = [x.id for x in devices[:devices.index(d)]]
                    reason = "first capable device in order" + (
                        f" ({', '.join(skipped)} skipped: {'; '.join(refusals)})" if refusals else
                        f" ({', '.join(skipped)} full)" if skipped else "")
                    break
        if chosen is None:
            raise GraphError(f"node {node.name!r} ({node.op}) needs {need} bytes; no capable device has them left")
        result.device[id(node)] = chosen
        result.reason[id(node)] = fallback + reason
        budget[id(chosen)] -= need
        load[id(chosen)] += max(need, 1)
    return result

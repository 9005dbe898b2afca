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


def estimated_work(node: Node, types: Mapping[int, TensorType]) -> float:
    """A rough count of a node's arithmetic: every element it reads and writes, plus, for each weight (a constant
    of rank 2 or more), the output elements times the weights one of them reads (a convolution's or a matrix
    product's multiply-adds)."""
    out = sum(types[id(v)].size for v in node.outputs)
    work = float(out + sum(types[id(v)].size for v in node.inputs))
    for v in node.inputs:
        if v.constant is None or v.constant.ndim < 2:
            continue
        shape = v.constant.shape
        outs = [d for w in node.outputs for d in types[id(w)].shape]
        per_channel = shape[0] if shape[0] in outs else shape[-1] if shape[-1] in outs else shape[0]
        work += out * v.constant.size / max(1, per_channel)
    return work


def pipeline_stages(nodes: Sequence[Node], types: Mapping[int, TensorType], count: int) -> dict[int, int]:
    """Node id -> stage (0 to ``count`` - 1): consecutive runs of ``nodes`` (in execution order) with about the
    same estimated work each."""
    work = [estimated_work(n, types) for n in nodes]
    total = sum(work) or 1.0
    stages: dict[int, int] = {}
    done = 0.0
    for n, w in zip(nodes, work):
        stages[id(n)] = min(count - 1, int((done + w / 2) / total * count))
        done += w
    return stages


def place(graph: Graph, nodes: Sequence[Node], types: Mapping[int, TensorType], devices: Sequence[Device],
          explicit: Mapping[str, str | Device] | None = None, strict: bool = False,
          policy: str = "fill") -> Placement:
    """Place ``nodes`` on ``devices`` (in preference order).

    ``explicit`` maps a node name or an op type to a device id; it wins.
    ``policy="fill"`` fills the first capable device until its memory is spent,
    then the next (vkml's greedy pass), keeping a chain where its input is;
    ``"spread"`` sends independent branches to different devices;
    ``"pipeline"`` cuts the execution order into one run of consecutive nodes per
    device, in order, with about the same estimated work each (stages that can
    overlap when several runs are in flight).
    ``strict=True`` refuses any node that cannot run where it was asked (or, with
    ``"pipeline"``, on its stage's device), or on the first device, instead of
    falling back.  ``devices`` may include devices of cluster nodes (``graph.remote``):
    placement asks each only for its ``id``, ``info`` and ``pool.free_bytes``.
    """
    from .remote import resolve as find

    if not devices:
        raise GraphError("compile: no devices to place the graph on")
    if policy not in ("fill", "spread", "pipeline"):
        raise GraphError(f"compile: placement policy must be 'fill', 'spread' or 'pipeline', got {policy!r}")
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
    stages = pipeline_stages(nodes, types, len(devices)) if policy == "pipeline" else {}
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
        elif stages:
            stage = devices[stages[id(node)]]
            why = _why_not(node, types, stage)
            if why is None and budget[id(stage)] >= need:
                result.device[id(node)] = stage
                result.reason[id(node)] = f"pipeline stage {stages[id(node)] + 1} of {len(devices)}"
                budget[id(stage)] -= need
                continue
            why = why or f"{stage.id} has not {need} bytes left"
            if strict:
                raise GraphError(f"node {node.name!r} ({node.op}) cannot run on {stage.id}, its pipeline stage's "
                                 f"device: {why} (strict=True refuses to fall back)")
            fallback = f"pipeline stage {stages[id(node)] + 1} is {stage.id}, but {why}; "
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
        if strict and target is None and not stages and capable[0] is not devices[0]:
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


def placement_lines(rows: Sequence[Mapping[str, str]], device_width: int = 10) -> tuple[list[str], dict[str, int]]:
    """The placement table's lines (node, op, device, why; the device column at least ``device_width`` wide) and
    the count of nodes per device, in the order devices first appear."""
    width = max([len(r["node"]) for r in rows] + [4])
    dev_width = max([len(r["device"]) for r in rows] + [device_width])
    lines = [f"{'node':<{width}}  {'op':<20} {'device':<{dev_width}} why"]
    lines += [f"{r['node']:<{width}}  {r['op']:<20} {r['device']:<{dev_width}} {r['why']}" for r in rows]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["device"]] = counts.get(r["device"], 0) + 1
    return lines, counts

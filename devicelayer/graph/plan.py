"""Execution plans: a graph placed, with transfers, memory planned, kernels compiled — run many times.

Preparing does the work once (placement, transfer insertion, arena offsets,
kernel compilation, constant upload); a run then submits every step with
event wait lists and returns when the outputs are back.
"""

from __future__ import annotations

import functools
import heapq
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..casting import to_dtype
from ..device import Device, refuse_forked
from ..errors import DeviceLayerError, EventError, GraphError, InvalidArgument
from ..events import Event
from ..interrupts import protected
from ..kernels.op import FLAG_SIZE, Alias, Flag, Plan as OpPlan, TensorType, flag_error, get
from ..kernels.runner import execute, plan_for, programs
from ..kernels.tile_tuning import tuned_plan
from ..memory import Buffer
from ..reclaim import on_drop
from ..tensors import Tensor
from ..transfer import copy_between
from .ir import Graph, Node, Value
from .run_guard import RunGuard
from .fuse import Fusion, annotate, fuse_graph, kernel_counts, report_lines
from . import precision, replay
from .lane import Lane, lane_inputs
from .layout import negotiate
from .memory import ArenaPlan, Slot, nbytes as _nbytes, plan_arena, plan_buffers
from .placement import Placement, place, placement_lines
from .profile import Profiled


@dataclass
class Step:
    """One submission of a run: feed an input, run a node, copy a value between devices, or fetch an output."""

    kind: str  # "input", "node", "copy", "output"
    device: Device
    value: Value | None = None
    node: Node | None = None
    source: Device | None = None
    op_plan: OpPlan | None = None
    compiled: list[Any] | None = None
    copies: list[tuple[int, int]] = field(default_factory=list)  # (input, output) views done as copies
    types: tuple[list[TensorType], list[TensorType]] | None = None  # what the op runs on where a layout differs

    def op_types(self, types: Mapping[int, TensorType]) -> tuple[list[TensorType], list[TensorType]]:
        """The input and output types a node step's op runs on: its values' types, or those a private layout
        gave it (``graph/layout.py``)."""
        if self.types is not None:
            return self.types
        return [types[id(v)] for v in self.node.inputs], [types[id(v)] for v in self.node.outputs]


@dataclass
class Prepared:
    """Everything a run needs for one set of input types."""

    types: dict[int, TensorType]
    placement: Placement
    steps: list[Step]
    arenas: dict[int, Buffer]
    arena_plans: dict[int, ArenaPlan]
    bufs: dict[tuple[int, int], Buffer]  # (value id, device id) -> buffer (inputs/outputs bound per run)
    temps: dict[int, list[Buffer]]  # node id -> scratch buffers
    consts: list[Buffer]
    transfers: int
    devices: list[Device]
    roots: dict[int, int] = field(default_factory=dict)
    replay: Any = None  # the recorded form (graph/replay.py), built on the first recorded run
    shared: list[tuple[Any, Device, np.ndarray]] = field(default_factory=list)  # (store, device, array) held
    #: (node, flag, scratch buffer) of the nodes whose kernels check input values (``kernels.op.Flag``)
    flags: list[tuple[Node, Flag, Buffer]] = field(default_factory=list)
    #: per device, the one buffer holding its flags' scratch, and each flag's (block index, byte offset) in them
    flag_blocks: list[Buffer] = field(default_factory=list)
    flag_slots: list[tuple[int, int]] = field(default_factory=list)
    #: the host arrays the blocks are read into (each from its device's ``host_array``), made on first use
    flag_hosts: list[np.ndarray] = field(default_factory=list)


def infer_types(graph: Graph, nodes: Sequence[Node], inputs: Mapping[str, TensorType]) -> dict[int, TensorType]:
    """Types of every value for these input types (re-runs each node's inference)."""
    types: dict[int, TensorType] = {}
    for v in graph.inputs:
        types[id(v)] = inputs.get(v.name, v.type)
    for v in graph.values.values():
        if v.constant is not None:
            types[id(v)] = v.type
    for n in nodes:
        try:
            _, outs = get(n.op).prepare([types[id(v)] for v in n.inputs], dict(n.attrs))
        except DeviceLayerError as exc:
            raise GraphError(f"node {n.name!r} ({n.op}) with these input shapes: {exc}") from exc
        for v, t in zip(n.outputs, outs):
            types[id(v)] = t
    return types




class ExecutionPlan(Profiled):
    """A compiled graph: ``plan(x=array)`` returns a dict of NumPy outputs; ``plan.run`` works on device Tensors."""

    def __init__(self, graph: Graph, devices: Sequence[Device], placement: Mapping[str, Any] | None,
                 strict: bool, policy: str, record: bool = True, constants: Any = None, fuse: bool = True,
                 allow_tf32: bool = False) -> None:
        self.source_graph = graph  # the caller's graph; ``graph`` is what runs (fused where ``fuse``)
        self.fusion: Fusion | None = None
        if allow_tf32:
            graph = precision.allow_tf32(graph)
        if fuse:
            graph, self.fusion = fuse_graph(graph, list(devices), placement, strict, policy)
            if self.fusion is not None:
                placement = {**(placement or {}), **self.fusion.pinned}
        self.graph = graph
        self.devices = list(devices)
        self._store = constants  # a ConstantStore shared with other plans (graph/constants.py), or None
        self._explicit = dict(placement or {})
        self._strict = strict
        self._policy = policy
        self._record = record
        self._nodes = graph.needed()
        self._version = self.source_graph.version
        self._cache: dict[tuple, Prepared] = {}
        # a plan dropped without release() still frees its arenas and constants (on the reclaim thread)
        self._finalizer = on_drop(self, _release_prepared, self._cache)
        self._busy = RunGuard()
        self.last_profile: list[dict[str, Any]] | None = None
        self.last_submit_seconds = 0.0  # host time the last run spent submitting its steps
        self._lane: Lane | None = None  # the path of more NumPy runs like the last (graph/lane.py)
        self._generation = 0  # counts releases: a lane made before one is spent
        self._prepared = self._prepare({v.name: v.type for v in graph.inputs})

    # -- preparing -------------------------------------------------------------------------
    def _prepare(self, input_types: Mapping[str, TensorType]) -> Prepared:
        key = _types_key(input_types)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        types = infer_types(self.graph, self._nodes, input_types)
        placement = place(self.graph, self._nodes, types, self.devices, self._explicit, self._strict, self._policy)
        annotate(placement, self.fusion)
        steps, transfers = self._schedule(placement, types)
        negotiate(steps, {id(v) for v in self.graph.outputs.values()}, types,
                  lambda step, ins, outs: self._op_plan(step.node, step.device, ins, outs))
        prepared = self._allocate(types, placement, steps, transfers)
        self._cache[key] = prepared
        return prepared

    def _schedule(self, placement: Placement, types: dict[int, TensorType]) -> tuple[list[Step], int]:
        """Steps in submission order: inputs uploaded where read, copies before readers, outputs last."""
        steps: list[Step] = []
        home: dict[int, Device] = {}  # value id -> device that produced it
        present: set[tuple[int, int]] = set()
        transfers = 0
        inputs = {id(v) for v in self.graph.inputs}
        for node in self._order(placement):
            dev = placement.of(node)
            for v in node.inputs:
                if v.constant is not None or (id(v), id(dev)) in present:
                    continue
                if id(v) in inputs:
                    steps.append(Step("input", dev, value=v))
                else:
                    steps.append(Step("copy", dev, value=v, source=home[id(v)]))
                    transfers += 1
                present.add((id(v), id(dev)))
            op_plan = self._op_plan(node, dev, [types[id(v)] for v in node.inputs],
                                    [types[id(v)] for v in node.outputs])
            steps.append(Step("node", dev, node=node, op_plan=op_plan))
            for v in node.outputs:
                home[id(v)] = dev
                present.add((id(v), id(dev)))
        for name, v in self.graph.outputs.items():
            if id(v) in home:
                steps.append(Step("output", home[id(v)], value=v))
        return steps, transfers

    @staticmethod
    def _op_plan(node: Node, dev: Device, ins: list[TensorType], outs: list[TensorType]) -> OpPlan:
        """How ``node``'s op runs on ``dev`` for these types (its constant inputs known)."""
        constants = {i: v.constant for i, v in enumerate(node.inputs) if v.constant is not None}
        op = get(node.op)
        return tuned_plan(op, dev, ins, outs, node.attrs, lambda: plan_for(op, dev, ins, outs, node.attrs, constants))

    def _order(self, placement: Placement) -> list[Node]:
        """Topological order preferring nodes whose inputs are all on their own device (fewer stalls), then the
        graph's order."""
        nodes = self._nodes
        producer = {id(v): n for n in nodes for v in n.outputs}
        waiting: dict[int, int] = {}
        readers: dict[int, list[Node]] = {}
        rank: dict[int, tuple[int, int]] = {}
        for i, n in enumerate(nodes):
            deps = {id(producer[id(v)]) for v in n.inputs if id(v) in producer}
            waiting[id(n)] = len(deps)
            for d in deps:
                readers.setdefault(d, []).append(n)
            dev = placement.of(n)
            foreign = sum(1 for v in n.inputs if id(v) in producer and placement.of(producer[id(v)]) is not dev)
            rank[id(n)] = (foreign, i)
        ready = [(rank[id(n)], id(n), n) for n in nodes if not waiting[id(n)]]
        heapq.heapify(ready)
        order: list[Node] = []
        while ready:
            _, _, n = heapq.heappop(ready)
            order.append(n)
            for m in readers.get(id(n), ()):
                waiting[id(m)] -= 1
                if not waiting[id(m)]:
                    heapq.heappush(ready, (rank[id(m)], id(m), m))
        return order

    def _allocate(self, types: dict[int, TensorType], placement: Placement, steps: list[Step],
                  transfers: int) -> Prepared:
        inputs = {id(v) for v in self.graph.inputs}
        outputs = {id(v) for v in self.graph.outputs.values()}
        # alias outputs share their input's storage, unless either side is bound per run (a graph
        # input or output) or the input is a constant (uploaded apart): then the node copies (Step.copies)
        roots: dict[int, int] = {}
        constants = {id(v) for v in self.graph.values.values() if v.constant is not None}
        for s in steps:
            if s.kind == "node":
                for a in s.op_plan.steps:
                    if isinstance(a, Alias):
                        src, dst = id(s.node.inputs[a.input]), id(s.node.outputs[a.output])
                        root = roots.get(src, src)
                        if root in inputs or root in outputs or root in constants or dst in outputs:
                            s.copies.append((a.input, a.output))
                        else:
                            roots[dst] = root
        slots: dict[int, dict[tuple[int, int], list[int]]] = {}
        per_device_temps: dict[int, list[tuple[tuple, TensorType, int, int]]] = {}
        flag_temps: dict[int, list[tuple[tuple[int, int], TensorType]]] = {}

        def touch(v: int, dev: Device, i: int) -> None:
            key = (roots.get(v, v), id(dev))
            span = slots.setdefault(id(dev), {}).setdefault(key, [i, i])
            span[0], span[1] = min(span[0], i), max(span[1], i)

        for i, s in enumerate(steps):
            if s.kind in ("input", "copy"):
                touch(id(s.value), s.device, i)
                if s.kind == "copy":
                    touch(id(s.value), s.source, i)
            elif s.kind == "output":
                touch(id(s.value), s.device, len(steps))
            else:
                for v in s.node.inputs:
                    if v.constant is None:
                        touch(id(v), s.device, i)
                for v in s.node.outputs:
                    touch(id(v), s.device, i)
                flagged = {f.temp for f in s.op_plan.flags}  # read after the run: one block per device
                for k, t in enumerate(s.op_plan.temps):
                    if k in flagged:
                        flag_temps.setdefault(id(s.device), []).append(((id(s.node), k), t))
                    else:
                        per_device_temps.setdefault(id(s.device), []).append(((id(s.node), k), t, i, i))
        arenas: dict[int, Buffer] = {}
        arena_plans: dict[int, ArenaPlan] = {}
        bufs: dict[tuple[int, int], Buffer] = {}
        temp_of: dict[int, dict[int, Buffer]] = {}  # node id -> temp index -> scratch buffer
        extra: list[Buffer] = []  # separate allocations where an arena would be too large
        by_id = {id(d): d for d in self.devices}
        value_of = {id(v): v for v in self.graph.values.values()}
        for dev_id, spans in slots.items():
            dev = by_id[dev_id]
            align = max(256, dev.info.view_alignment)
            entries = [Slot(key, _nbytes(types[key[0]]), a, b) for key, (a, b) in spans.items()
                       if key[0] not in outputs and key[0] not in inputs]
            entries += [Slot(("tmp",) + key, _nbytes(t), i, last)
                        for key, t, i, last in per_device_temps.get(dev_id, [])]
            whole = dev.pool.whole_buffers  # launches on views of one arena run slower there
            arena_plan = (plan_buffers if whole else plan_arena)(entries, align)
            arena_plans[dev_id] = arena_plan
            separate = arena_plan.peak > dev.info.max_allocation  # one arena would exceed the largest buffer
            try:
                if whole:
                    held = [dev.pool.allocate(size) for size in arena_plan.buffer_sizes or ()]
                    extra += held
                    own = {e.key: held[arena_plan.buffers[e.key]] for e in entries}  # type: ignore[index]
                elif arena_plan.peak and not separate:
                    arenas[dev_id] = dev.pool.allocate(arena_plan.peak)
                    own = None
                else:
                    own = {e.key: dev.pool.allocate(max(e.nbytes, 1)) for e in entries}
                    for b in own.values():
                        extra.append(b)
            except DeviceLayerError as exc:
                raise GraphError(f"{dev.id}: cannot allocate {arena_plan.peak} bytes for the plan: {exc}") from exc
            for e in entries:
                view = (own[e.key].view(0, e.nbytes) if own is not None
                        else arenas[dev_id].view(arena_plan.offsets[e.key], e.nbytes))
                if e.key[0] == "tmp":
                    temp_of.setdefault(e.key[1], {})[e.key[2]] = view
                else:
                    bufs[e.key] = view.view(0, e.nbytes, types[e.key[0]].dtype)
            for key in spans:
                if key[0] in inputs or key[0] in outputs:
                    bufs.setdefault(key, None)  # bound per run
        flag_blocks, flag_slots = self._flag_blocks(flag_temps, by_id, temp_of, extra)
        temps = {node: [held[k] for k in range(len(held))] for node, held in temp_of.items()}
        # aliases: the output reads the root's buffer
        for v, root in roots.items():
            for dev in self.devices:
                if (root, id(dev)) in bufs and bufs[(root, id(dev))] is not None:
                    bufs[(v, id(dev))] = bufs[(root, id(dev))].view(0, _nbytes(types[v]), types[v].dtype)
        shared: list[tuple[Any, Device, np.ndarray]] = []
        consts = self._upload_constants(types, placement, bufs, shared) + extra
        for s in steps:  # compile every kernel now, not on the first run
            if s.kind == "node":
                s.compiled = programs(get(s.node.op), s.device, s.op_plan, *s.op_types(types), s.node.attrs)
        del value_of
        flags = [(s.node, f, temps[id(s.node)][f.temp].view(0, FLAG_SIZE * s.op_plan.temps[f.temp].dtype.itemsize,
                                                              s.op_plan.temps[f.temp].dtype))
                 for s in steps if s.kind == "node" for f in s.op_plan.flags]
        return Prepared(types, placement, steps, arenas, arena_plans, bufs, temps, consts, transfers,
                        list(self.devices), roots, shared=shared, flags=flags, flag_blocks=flag_blocks,
                        flag_slots=[flag_slots[(id(n), f.temp)] for n, f, _ in flags])

    @staticmethod
    def _flag_blocks(flag_temps: dict[int, list[tuple[tuple[int, int], TensorType]]], by_id: dict[int, Device],
                     temp_of: dict[int, dict[int, Buffer]], extra: list[Buffer]
                     ) -> tuple[list[Buffer], dict[tuple[int, int], tuple[int, int]]]:
        """The scratch of every flag of a device in one buffer of its own (kept for the plan's life, so a run
        reads them all back in one transfer): the blocks, and each flag's (block index, byte offset)."""
        blocks: list[Buffer] = []
        slots: dict[tuple[int, int], tuple[int, int]] = {}
        for dev_id, held in flag_temps.items():
            dev = by_id[dev_id]
            align = max(256, dev.info.view_alignment)
            offsets, end = [], 0
            for _, t in held:
                offsets.append(end)
                end += -(-max(_nbytes(t), 1) // align) * align
            try:
                block = dev.pool.allocate(end)
            except DeviceLayerError as exc:
                raise GraphError(f"{dev.id}: cannot allocate {end} bytes for the plan's value checks: {exc}") from exc
            extra.append(block)
            for (key, t), at in zip(held, offsets):
                temp_of.setdefault(key[0], {})[key[1]] = block.view(at, _nbytes(t))
                slots[key] = (len(blocks), at)
            blocks.append(block)
        return blocks, slots

    def _upload_constants(self, types: dict[int, TensorType], placement: Placement,
                          bufs: dict[tuple[int, int], Buffer], shared: list) -> list[Buffer]:
        consts: list[Buffer] = []
        events = []
        for node in self._nodes:
            dev = placement.of(node)
            for v in node.inputs:
                if v.constant is None or (id(v), id(dev)) in bufs:
                    continue
                arr = v.constant
                if self._store is not None:  # one device copy for every plan of the model
                    bufs[(id(v), id(dev))], event = self._store.acquire(dev, arr)
                    shared.append((self._store, dev, arr))
                    if event is not None:
                        events.append(event)
                    continue
                buf = dev.pool.allocate(max(arr.nbytes, arr.dtype.itemsize), arr.dtype)
                if arr.nbytes:
                    events.append(dev.pool.upload(buf.view(0, arr.nbytes, arr.dtype), arr))
                bufs[(id(v), id(dev))] = buf
                consts.append(buf)
        for e in events:
            e.wait()
        return consts

    # -- running ---------------------------------------------------------------------------------
    def __call__(self, profile: bool = False, **inputs: Any) -> dict[str, np.ndarray]:
        """Run with NumPy inputs (by name); returns every output as a NumPy array."""
        return self.run_numpy(inputs, profile)

    def run_numpy(self, inputs: Mapping[str, Any], profile: bool = False) -> dict[str, np.ndarray]:
        """``plan(**inputs)`` with the inputs as a mapping (names that are not Python identifiers too)."""
        if self._record and not profile:
            lane = self._lane
            if lane is not None and isinstance(inputs, Mapping):
                out = lane.run(inputs)
                if out is not None:
                    return out
            out = self._locked(inputs, profile, True)
            self._lane = self.lane_for(inputs)
            return out
        tensors = self.run(inputs, profile=profile)
        try:
            return {name: t.numpy() for name, t in tensors.items()}
        finally:  # a Ctrl-C while reading them too
            _free_outputs(tensors, inputs)

    def run(self, inputs: Mapping[str, Any], profile: bool = False) -> dict[str, Tensor]:
        """Run with NumPy arrays or device Tensors as inputs; returns output Tensors (each in its own buffer).

        The caller owns the returned Tensors: ``tensor.device.pool.free(tensor.buffer)`` when done.
        """
        return self._locked(inputs, profile, False)

    def _locked(self, inputs: Mapping[str, Any], profile: bool, to_numpy: bool) -> dict[str, Any]:
        refuse_forked(self.devices)  # (before the lock: a thread of the parent may have held it)
        if self.source_graph.version != self._version:
            raise GraphError("the graph changed after it was compiled; compile it again")
        if not self._busy.claim():
            raise GraphError("this plan is already running in another thread; plans run one at a time "
                             "(compile a second plan to run concurrently)")
        try:
            self._busy.running = True
            if self._record and not profile:
                return self._replay(inputs, to_numpy)
            return self._run(inputs, profile)
        finally:
            self._busy.running = False
            self._busy.owner = None

    def _replay(self, inputs: Mapping[str, Any], to_numpy: bool) -> dict[str, Any]:
        """A run through the recorded form of the prepared plan (one submission per same-device segment)."""
        feeds, in_types = self._feeds(inputs)
        prepared = self._prepare(in_types)
        if prepared.replay is None:
            prepared.replay = replay.build(prepared, self.graph)
        return self._replayed(prepared, feeds, to_numpy)

    def _replayed(self, prepared: Prepared, feeds: Mapping[int, Any], to_numpy: bool) -> dict[str, Any]:
        """A replay of ``prepared`` (recorded) on feeds of its types, by value id."""
        node_events: list[tuple[Node, Event]] = []
        t_start = time.perf_counter()
        results: dict[str, Any] = {}
        reads: list[Event] = []  # the flags' reads, queued behind the run before its outputs are waited for
        submitted = (lambda: reads.extend(_read_flags(prepared, node_events))) if prepared.flags else None
        try:
            results = replay.run(prepared.replay, feeds, prepared.types, to_numpy, self.devices, node_events,
                                 submitted)
            self.last_submit_seconds = time.perf_counter() - t_start
            if not to_numpy:
                self._await(results, node_events)
            if prepared.flags:
                _check_flags(prepared, node_events, reads or None)
        except EventError as exc:
            self._free_results(results)
            self._raise_failed(node_events, exc)
        except BaseException:
            self._free_results(results)
            raise
        return results

    @staticmethod
    @protected
    def _free_results(results: Mapping[str, Any]) -> None:
        for t in results.values():
            if isinstance(t, Tensor) and not t.buffer.freed and t.buffer.base is None:
                t.device.pool.free(t.buffer)

    def _feeds(self, inputs: Mapping[str, Any]) -> tuple[dict[int, Any], dict[str, TensorType]]:
        return check_feeds(self.graph, inputs)

    def _run(self, inputs: Mapping[str, Any], profile: bool) -> dict[str, Tensor]:
        feeds, in_types = self._feeds(inputs)
        prepared = self._prepare(in_types)
        types = prepared.types
        bufs = dict(prepared.bufs)
        ready: dict[tuple[int, int], Event] = {}
        owned: list[tuple[Device, Buffer]] = []
        node_events: list[tuple[Node, Event]] = []
        timeline: list[dict[str, Any]] = []
        outputs = {id(v) for v in self.graph.outputs.values()}
        t_start = time.perf_counter()
        # The arena plan reuses memory across steps, which assumes every access to a device's memory is
        # ordered.  A copy is run by another device's queue (a download writes the host's memory, an upload
        # reads it), so each step also waits for the last step that touched the memory it reads or writes.
        last: dict[int, Event] = {}

        def after(*devs: Device) -> list[Event]:
            return [last[id(d)] for d in devs if id(d) in last]

        @protected  # (a Ctrl-C between the allocation and its entry in ``owned`` would leak the buffer)
        def fresh(dev: Device, v_id: int) -> Buffer:
            t = types[v_id]
            buf = dev.pool.allocate(_nbytes(t), t.dtype)
            owned.append((dev, buf))
            return buf

        try:
            for step in prepared.steps:
                dev = step.device
                if step.kind == "input":
                    v = step.value
                    x = feeds[id(v)]
                    key = (id(v), id(dev))
                    if isinstance(x, Tensor) and x.device is dev:
                        bufs[key], ready[key] = x.buffer, x.ready
                    else:
                        buf = bufs[key] = fresh(dev, id(v))
                        if isinstance(x, Tensor):
                            ready[key] = copy_between(buf.view(0, x.nbytes, np.uint8),
                                                      x.buffer.view(0, x.nbytes, np.uint8), [x.ready])
                        elif x.nbytes:
                            ready[key] = dev.pool.upload(buf.view(0, x.nbytes, x.dtype), x, after(dev))
                        if key in ready:
                            last[id(dev)] = ready[key]
                elif step.kind == "copy":
                    v = step.value
                    key, src_key = (id(v), id(dev)), (id(v), id(step.source))
                    if bufs.get(key) is None:
                        bufs[key] = fresh(dev, id(v))
                    n = types[id(v)].size * types[id(v)].dtype.itemsize
                    if n:
                        ready[key] = copy_between(bufs[key].view(0, n, np.uint8), bufs[src_key].view(0, n, np.uint8),
                                                  [e for e in [ready.get(src_key)] if e is not None]
                                                  + after(dev, step.source))
                        last[id(dev)] = last[id(step.source)] = ready[key]
                elif step.kind == "node":
                    node = step.node
                    for v in node.outputs:
                        key = (id(v), id(dev))
                        if id(v) in outputs and bufs.get(key) is None:
                            root = prepared.roots.get(id(v))
                            bufs[key] = (bufs[(root, id(dev))].view(0, _nbytes(types[id(v)]), types[id(v)].dtype)
                                         if root is not None and bufs.get((root, id(dev))) is not None
                                         else fresh(dev, id(v)))
                    in_keys = [(id(v), id(dev)) for v in node.inputs]
                    waits = [ready[k] for k in in_keys if k in ready] + after(dev)
                    t0 = time.perf_counter()
                    try:
                        event = execute(get(node.op), dev, step.op_plan, *step.op_types(types), node.attrs,
                                        [bufs[k] for k in in_keys], [bufs[(id(v), id(dev))] for v in node.outputs],
                                        prepared.temps.get(id(node), []), waits, step.compiled)
                    except DeviceLayerError as exc:
                        raise GraphError(f"node {node.name!r} ({node.op}) on {dev.id} failed: {exc}") from exc
                    for i, j in step.copies:
                        n = types[id(node.outputs[j])].size * types[id(node.outputs[j])].dtype.itemsize
                        if n:
                            event = dev.pool.copy(bufs[(id(node.outputs[j]), id(dev))].view(0, n, np.uint8),
                                                  bufs[in_keys[i]].view(0, n, np.uint8), [event])
                    t1 = time.perf_counter()
                    for v in node.outputs:
                        ready[(id(v), id(dev))] = event
                    last[id(dev)] = event
                    node_events.append((node, event))
                    if profile:
                        record = {"node": node.name, "op": node.op, "device": dev.id,
                                  "submitted": t0 - t_start, "host_us": (t1 - t0) * 1e6}
                        timeline.append(record)
                        event._on_done(lambda _e, r=record: r.setdefault(
                            "completed", time.perf_counter() - t_start))
            self.last_submit_seconds = time.perf_counter() - t_start
            results: dict[str, Tensor] = {}
            for name, v in self.graph.outputs.items():
                home = next((s.device for s in prepared.steps if s.kind == "output" and s.value is v), None)
                if home is None:  # an input or constant returned as is
                    x = feeds.get(id(v), v.constant)
                    results[name] = x if isinstance(x, Tensor) else _host_tensor(np.array(x), self.devices)
                    continue
                key = (id(v), id(home))
                buf = bufs[key]
                ev = ready.get(key)
                results[name] = Tensor(buf, types[id(v)].shape, types[id(v)].dtype, ev)
            self._await(results, node_events)
            if prepared.flags:
                _check_flags(prepared, node_events)
        except BaseException:
            _free_owned(owned, ())  # the outputs too: a failed or interrupted run returns none of them
            raise
        _free_owned(owned, results.values())
        if profile:
            self.last_profile = _finish_profile(timeline, node_events, t_start)
        return results

    def _await(self, results: dict[str, Tensor], node_events: list[tuple[Node, Event]]) -> None:
        """Wait for the outputs; a failure is raised naming the node it started at."""
        try:
            for t in results.values():
                t.ready.wait()
        except EventError as exc:
            self._raise_failed(node_events, exc)

    @staticmethod
    def _raise_failed(node_events: list[tuple[Node, Event]], exc: EventError) -> None:
        """Raise the GraphError naming the node a failure started at."""
        failed = [(node, ev) for node, ev in node_events if ev.done and ev.error is not None]
        named = [(n, e) for n, e in failed if f"node {n.name!r}" in str(e.error)]  # a recorded item's label
        first = [(n, e) for n, e in failed if "dependency" not in str(e.error)]
        for node, ev in (named or first or failed)[:1]:
            bad = _bad_value(ev.error) if get(node.op).checks_values else None
            if bad is not None:  # a value the op checks (an index out of range): the caller's input was wrong
                raise InvalidArgument(f"node {node.name!r} ({node.op}): {bad}") from ev.error
            raise GraphError(f"node {node.name!r} ({node.op}) failed: {ev.error}") from ev.error
        raise GraphError(f"run failed: {exc}") from exc

    # -- reports --------------------------------------------------------------------------------
    def placement_table(self) -> list[dict[str, str]]:
        """Each node with its op, device and the reason it went there."""
        p = self._prepared.placement
        return [{"node": n.name, "op": n.op, "device": p.of(n).id, "why": p.reason[id(n)]} for n in p.nodes]

    def placement_report(self) -> str:
        """A readable table of the placement, with the count of transfers."""
        rows = self.placement_table()
        lines, counts = placement_lines(rows)
        lines.append(f"{len(rows)} nodes ({', '.join(f'{d}: {c}' for d, c in counts.items())}); "
                     f"{self._prepared.transfers} transfer(s) between devices")
        return "\n".join(lines + report_lines(self._prepared.steps, self.fusion))

    def kernel_counts(self) -> dict[str, int]:
        """Kernel launches per run, ``before`` and ``after`` fusion (``compile(fuse=False)``: the same)."""
        return kernel_counts(self._prepared.steps, self.fusion)

    @property
    def transfers(self) -> int:
        """Number of device-to-device copies each run makes."""
        return self._prepared.transfers

    def memory_report(self) -> dict[str, dict[str, int]]:
        """Per device: arena ``peak``, ``lower_bound`` (most bytes live at one step) and ``no_reuse`` total."""
        by_id = {id(d): d for d in self.devices}
        return {by_id[k].id: {"peak": a.peak, "lower_bound": a.lower_bound, "no_reuse": a.no_reuse}
                for k, a in self._prepared.arena_plans.items()}



    def release(self) -> None:
        """Free the arenas and constants of every prepared shape."""
        self._lane = None
        self._generation += 1
        _release_prepared(self._cache)

    # -- the steady-state path ------------------------------------------------------------------------
    def lane_for(self, inputs: Mapping[str, Any], checks: Sequence[tuple[str, tuple[int, ...], np.dtype]] = (),
                 outputs: Any = None) -> Lane | None:
        """A Lane for NumPy runs with inputs like ``inputs`` (by the graph's input names), which were just
        checked and run here; None where no lane applies (not recorded, an input not a C-contiguous array of its
        dtype, nothing prepared for them).  ``checks``: the caller's own inputs to check instead of these;
        ``outputs``: the run's result from this plan's (``Lane``)."""
        if not self._record or not isinstance(inputs, Mapping) or self.source_graph.version != self._version:
            return None
        mine = lane_inputs({v.name: inputs.get(v.name) for v in self.graph.inputs})
        if mine is None or any(dtype != v.dtype for (_, _, dtype), v in zip(mine, self.graph.inputs)):
            return None
        if not checks:
            checks = lane_inputs(inputs)
            if checks is None or len(checks) != len(mine):
                return None
        prepared = self._cache.get(_types_key({name: TensorType(shape, dtype) for name, shape, dtype in mine}))
        if prepared is None or prepared.replay is None:
            return None
        replay = functools.partial(self._lane_replay, prepared, self._generation)
        return Lane(checks, [(v.name, id(v)) for v in self.graph.inputs], replay, outputs)

    def _lane_replay(self, prepared: Prepared, generation: int, feeds: dict[int, np.ndarray]) -> dict[str, Any] | None:
        """A lane's replay of ``prepared``; None where the full path must run (released since, the graph
        changed, the plan busy)."""
        refuse_forked(self.devices)  # (before the lock: a thread of the parent may have held it)
        if generation != self._generation or self.source_graph.version != self._version:
            return None
        if not self._busy.claim():
            return None
        try:
            self._busy.running = True
            return self._replayed(prepared, feeds, True)
        finally:
            self._busy.running = False
            self._busy.owner = None


def check_feeds(graph: Graph, inputs: Mapping[str, Any]) -> tuple[dict[int, Any], dict[str, TensorType]]:
    """The feeds of a run of ``graph`` by value id (host data converted to each input's dtype) and their types
    by name; InvalidArgument naming the input for an unknown, missing or mistyped one."""
    if not isinstance(inputs, Mapping):
        raise InvalidArgument(f"inputs must be a mapping of input name to array or Tensor, "
                              f"got {type(inputs).__name__}")
    expected = {v.name: v for v in graph.inputs}
    unknown = sorted(set(inputs) - set(expected))
    if unknown:
        raise InvalidArgument(f"unknown input(s) {unknown}; the graph takes {sorted(expected)}")
    missing = sorted(set(expected) - set(inputs))
    if missing:
        raise InvalidArgument(f"missing input(s) {missing}")
    feeds, types = {}, {}
    for name, v in expected.items():
        x = inputs[name]
        if isinstance(x, Tensor):
            x.buffer.check_alive(f"input {name!r}")
            t = TensorType(x.shape, x.dtype)
        else:
            x = to_dtype(x, v.dtype, f"input {name!r}")
            if not x.flags.c_contiguous:
                x = x.copy(order="C")
            t = TensorType(x.shape, x.dtype)
        if t.dtype != v.dtype:
            raise InvalidArgument(f"input {name!r} must be {v.dtype}, got {t.dtype}")
        if len(t.shape) != len(v.shape):
            raise InvalidArgument(f"input {name!r} must have rank {len(v.shape)}, got shape {t.shape}")
        feeds[id(v)] = x
        types[name] = t
    return feeds, types


def _bad_value(error: BaseException | None) -> InvalidArgument | None:
    """The InvalidArgument an op raised for a bad input value, found along a failure's causes."""
    while error is not None and not isinstance(error, InvalidArgument):
        error = error.__cause__
    return error


def _read_flags(prepared: Prepared, node_events: list[tuple[Node, Event]]) -> list[Event]:
    """Queue the reads of a run's Flags: each device's block in one transfer into a host array of its own (pinned
    where the device has such memory), behind every node that sets one of them."""
    blocks, hosts = prepared.flag_blocks, prepared.flag_hosts
    if not hosts:
        hosts.extend(b.pool.host_array((b.nbytes,), np.uint8) for b in blocks)
    done = {id(n): ev for n, ev in node_events}
    waits: list[list[Event]] = [[] for _ in blocks]
    for (node, _, _), (block, _) in zip(prepared.flags, prepared.flag_slots):
        ev = done.get(id(node))
        if ev is not None and all(ev is not w for w in waits[block]):
            waits[block].append(ev)
    return [b.pool.download(b.view(0, b.nbytes, np.uint8), host, w) for b, host, w in zip(blocks, hosts, waits)]


def _check_flags(prepared: Prepared, node_events: list[tuple[Node, Event]], reads: list[Event] | None = None) -> None:
    """Read back the Flags of a finished run (``reads``: those ``_read_flags`` queued already): InvalidArgument
    naming the first node whose kernel flagged a bad input value (the run's outputs are then not to be used)."""
    for e in reads if reads is not None else _read_flags(prepared, node_events):
        e.wait()
    for (node, flag, buf), (block, at) in zip(prepared.flags, prepared.flag_slots):
        contents = prepared.flag_hosts[block][at:at + buf.nbytes].view(buf.dtype)
        error = flag_error(flag, contents)
        if error is not None:
            raise InvalidArgument(f"node {node.name!r} ({node.op}): {error}") from None


@protected
def _free_owned(owned: list[tuple[Device, Buffer]], kept: Any) -> None:
    """Free the buffers a run made, but those of the Tensors ``kept`` (what it returns)."""
    keep = {id(t.buffer) for t in kept}
    for dev, buf in owned:
        if id(buf) not in keep and not buf.freed:
            dev.pool.free(buf)


@protected
def _free_outputs(tensors: Mapping[str, Tensor], inputs: Mapping[str, Any]) -> None:
    """Free the output Tensors of a run that were read into NumPy arrays (not those that are inputs)."""
    fed = {id(x.buffer) for x in inputs.values() if isinstance(x, Tensor)}
    for t in {id(t.buffer): t for t in tensors.values()}.values():
        if id(t.buffer) not in fed and t.buffer.base is None and not t.buffer.freed:
            t.device.pool.free(t.buffer)


def _types_key(input_types: Mapping[str, TensorType]) -> tuple:
    """The key of a prepared plan: every input's name, shape and dtype."""
    return tuple(sorted((k, t.shape, t.dtype.str) for k, t in input_types.items()))


def _release_prepared(cache: dict[tuple, Prepared]) -> None:
    for prepared in cache.values():
        if prepared.replay is not None:
            prepared.replay.release()
        for arena in prepared.arenas.values():
            if not arena.freed:
                arena.pool.free(arena)
        for c in prepared.consts:
            if not c.freed:
                c.pool.free(c)
        for store, dev, arr in prepared.shared:
            store.release(dev, arr)
        prepared.shared.clear()
    cache.clear()


def _host_tensor(array: np.ndarray, devices: Sequence[Device]) -> Tensor:
    from ..tensors import tensor

    return tensor(array, devices[0])


def _finish_profile(timeline: list[dict[str, Any]], node_events: list[tuple[Node, Event]],
                    t_start: float) -> list[dict[str, Any]]:
    """Per node: host overhead and an estimate of device time (start = later of submit and the device's previous end)."""
    for _, ev in node_events:
        ev.wait()
    last_end: dict[str, float] = {}
    for r in timeline:
        r.setdefault("completed", time.perf_counter() - t_start)
        start = max(r["submitted"], last_end.get(r["device"], 0.0))
        r["start"] = start
        r["device_us"] = max(0.0, (r["completed"] - start) * 1e6)
        last_end[r["device"]] = r["completed"]
    return timeline

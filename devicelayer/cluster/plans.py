"""Plans over a cluster.

``parallel="model"``: the graph placed over the devices of every node (the
ordinary placement policies), cut into parts by node (``partition.py``); each
node compiles its parts into ordinary plans, and a run chains the parts
through Ray object references, so a value goes from the node that made it to
the node that reads it without passing through the driver.  With several runs
in flight (``submit``, ``map``) the parts on different nodes overlap: a
pipeline.

``parallel="data"``: every node compiles the whole graph over its devices;
a run cuts its batch (axis 0 of every input) into parts of the graph's batch,
spreads them over the nodes and concatenates their outputs.

Both: ``plan(**feeds)`` returns NumPy outputs as a plan on one machine does.
"""

from __future__ import annotations

import collections
import itertools
import time
import uuid
import weakref
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..errors import GraphError, InvalidArgument, NodeError
from ..graph.ir import Graph, Value
from ..graph.placement import place
from ..graph.plan import check_feeds, infer_types
from ..graph.profile import Profiled
from ..tensors import Tensor
from . import report
from .engine import ray
from .failures import Call, gather
from .partition import Part, partition, subgraph
from .proxy import RemoteDevice

_serial = itertools.count()


class ClusterRun:
    """One run in flight on a cluster plan; ``result(timeout=None)`` waits for its outputs."""

    def __init__(self, plan: "ClusterPlan", calls: list[Call], outputs: dict[str, Any], stats: list[Any],
                 t0: float, timeout: float | None, profile: bool) -> None:
        self._plan = plan
        self._calls = calls
        self._outputs = outputs  # name -> list of references or values, concatenated along axis 0 when several
        self._stats = stats
        self._t0 = t0
        self._timeout = timeout
        self._profile = profile
        self._result: dict[str, np.ndarray] | None = None

    def done(self) -> bool:
        """True when every node has finished its part of this run (successfully or not)."""
        r = ray()
        refs = [c.done for c in self._calls]
        ready, _ = r.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
        return len(ready) == len(refs)

    def result(self, timeout: float | None = None) -> dict[str, np.ndarray]:
        """The outputs as NumPy arrays; a node that fails, dies or does not finish within ``timeout`` (else the
        run's own) raises NodeError naming the node and the graph node its part starts at."""
        if self._result is not None:
            return self._result
        timeout = self._timeout if timeout is None else timeout
        names = list(self._outputs)
        refs = [x for name in names for x in self._outputs[name] if _is_ref(x)]
        try:
            values = gather(self._calls, refs + self._stats, timeout, "running")
        except NodeError as exc:
            if not getattr(exc, "timed_out", False):
                self._plan._broken = str(exc)
            raise
        got = iter(values[:len(refs)])
        result = {}
        for name in names:
            pieces = [next(got) if _is_ref(x) else x for x in self._outputs[name]]
            result[name] = (np.array(pieces[0]) if len(pieces) == 1 else np.concatenate(pieces, axis=0))
        self._plan._finished(self._calls, values[len(refs):], time.time() - self._t0, self._t0, self._profile)
        self._result = result
        return result


def _is_ref(x: Any) -> bool:
    return type(x).__name__ == "ObjectRef"


class ClusterPlan(Profiled):
    """A graph compiled over devices of cluster nodes: ``plan(**feeds)``, ``submit``/``map`` for runs in
    flight, and the reports of a plan (placement with cross-node transfers, memory, trace, Gantt)."""

    parallel = ""
    gantt_title = "devicelayer run on a cluster"

    def __init__(self, connection: Any, graph: Graph, devices: Sequence[RemoteDevice], timeout: float | None) -> None:
        self.graph = graph
        self.devices = list(devices)
        self.timeout = timeout
        self._connection = connection
        self._version = graph.version
        self._prefix = f"{uuid.uuid4().hex[:12]}-{next(_serial)}"
        self._held: list[tuple[Any, str]] = []  # (actor, key) of every compiled part
        self._finalizer = weakref.finalize(self, _release, self._held)
        self._broken: str | None = None
        self.last_run: dict[str, Any] | None = None
        self.last_profile: list[dict[str, Any]] | None = None

    # -- running ---------------------------------------------------------------------------
    def __call__(self, profile: bool = False, timeout: float | None = None, **inputs: Any) -> dict[str, np.ndarray]:
        """Run with NumPy inputs (by name); every output as a NumPy array."""
        return self.run_numpy(inputs, profile, timeout)

    def run_numpy(self, inputs: Mapping[str, Any], profile: bool = False,
                  timeout: float | None = None) -> dict[str, np.ndarray]:
        """``plan(**inputs)`` with the inputs as a mapping."""
        return self.submit(inputs, profile, timeout).result()

    def submit(self, inputs: Mapping[str, Any], profile: bool = False, timeout: float | None = None) -> ClusterRun:
        """Start a run and return at once; several runs in flight overlap where their parts are on other nodes."""
        self._check_usable()
        if timeout is not None and (not isinstance(timeout, (int, float)) or timeout <= 0):
            raise InvalidArgument(f"timeout must be a positive number of seconds, got {timeout!r}")
        feeds, _ = check_feeds(self.graph, inputs)
        arrays = {k: (x.numpy() if isinstance(x, Tensor) else np.ascontiguousarray(x)) for k, x in feeds.items()}
        return self._submit(arrays, bool(profile), self.timeout if timeout is None else timeout)

    def map(self, inputs: Iterable[Mapping[str, Any]], in_flight: int = 2, profile: bool = False,
            timeout: float | None = None) -> list[dict[str, np.ndarray]]:
        """The outputs of one run per mapping of ``inputs``, with up to ``in_flight`` runs in flight at once."""
        if not isinstance(in_flight, int) or isinstance(in_flight, bool) or in_flight < 1:
            raise InvalidArgument(f"map: in_flight must be a positive int, got {in_flight!r}")
        pending: collections.deque[ClusterRun] = collections.deque()
        results = []
        for feeds in inputs:
            pending.append(self.submit(feeds, profile, timeout))
            if len(pending) >= in_flight:
                results.append(pending.popleft().result())
        while pending:
            results.append(pending.popleft().result())
        return results

    def _check_usable(self) -> None:
        if not self._finalizer.alive:
            raise GraphError("this plan was released; compile the graph again")
        if self._connection.closed:
            raise GraphError("the cluster connection of this plan was closed; connect and compile again")
        if self.graph.version != self._version:
            raise GraphError("the graph changed after it was compiled; compile it again")
        if self._broken is not None:
            raise NodeError(f"a node of this plan failed ({self._broken}); compile the graph again once the cluster "
                            "has recovered")

    def _submit(self, arrays: dict[int, np.ndarray], profile: bool, timeout: float | None) -> ClusterRun:
        raise NotImplementedError

    def _finished(self, calls: Sequence[Call], stats: Sequence[dict[str, Any]], seconds: float, t0: float,
                  profile: bool) -> None:
        parts = [{"node": c.node, "first": c.op, "stats": s} for c, s in zip(calls, stats)]
        self.last_run = {"seconds": seconds, "fetch_seconds": sum(s["fetched"] for s in stats),
                         "parts": [{"node": p["node"], "first": p["first"],
                                    **{k: p["stats"][k] for k in ("waited", "fetched", "ran", "bytes")}}
                                   for p in parts]}
        if profile:
            self.last_profile = report.timeline(parts, t0)

    # -- reports ---------------------------------------------------------------------------
    @property
    def nodes(self) -> list[str]:
        """The names of the cluster nodes the plan runs on."""
        return list(dict.fromkeys(d.node for d in self.devices))

    def placement_table(self) -> list[dict[str, str]]:
        """Each graph node with its op, node-qualified device and the reason it went there."""
        raise NotImplementedError

    def transfer_table(self) -> list[dict[str, Any]]:
        """What one run moves: each ``value`` with its ``kind`` ("input", "cross-node", "output"), ``source`` and
        ``target`` (a node's name, or "driver") and ``bytes``."""
        raise NotImplementedError

    @property
    def transfers(self) -> int:
        """The number of transfers between nodes one run makes."""
        return sum(1 for m in self.transfer_table() if m["kind"] == "cross-node")

    def placement_report(self) -> str:
        """A readable table of the placement with the transfers between nodes (and the last run's times)."""
        return report.placement_text(self.placement_table(), self.transfer_table(), self.last_run)

    def memory_report(self) -> dict[str, dict[str, int]]:
        """Per node-qualified device: arena ``peak``, ``lower_bound`` and ``no_reuse`` (added up over its parts)."""
        return report.merged_memory(self._memory)



    def release(self) -> None:
        """Free the parts compiled on every node (the plan cannot run afterwards)."""
        self._finalizer()

    def _prepare_all(self, jobs: Sequence[tuple[str, Any, str, Any, list[str], dict[str, str] | None]],
                     strict: bool, policy: str, record: bool, fuse: bool) -> list[dict[str, Any]]:
        """Compile every (node, actor, key, graph, devices, placement) at once; their reports."""
        refs, calls = [], []
        for node, actor, key, graph, devices, placement in jobs:
            ref = actor.prepare.remote(key, graph, devices, placement, strict, policy, record, fuse)
            self._held.append((actor, key))
            refs.append(ref)
            calls.append(Call(node, graph.nodes[0].name if graph.nodes else "?", ref))
        return gather(calls, refs, self.timeout, "compiling")


def _release(held: list[tuple[Any, str]]) -> None:
    for actor, key in held:
        try:
            actor.release.remote(key)
        except Exception:  # noqa: BLE001 - its node (or Ray) is gone, and the part with it
            pass
    held.clear()


class ModelPlan(ClusterPlan):
    """The graph split over nodes: each node runs its parts; parts are chained node to node."""

    parallel = "model"

    def __init__(self, connection: Any, graph: Graph, devices: Sequence[RemoteDevice],
                 explicit: Mapping[str, Any] | None, strict: bool, policy: str, record: bool, fuse: bool,
                 timeout: float | None) -> None:
        super().__init__(connection, graph, devices, timeout)
        nodes = graph.needed()
        self._types = infer_types(graph, nodes, {v.name: v.type for v in graph.inputs})
        self._placement = place(graph, nodes, self._types, self.devices, explicit, strict, policy)
        where = {id(n): self._placement.of(n).node for n in nodes}
        self.parts: list[Part] = partition(graph, nodes, where)
        actors = {s.name: s.actor for s in connection.nodes_now()}
        order = {d.id: i for i, d in enumerate(self.devices)}
        jobs = []
        for part in self.parts:
            used = sorted({self._placement.of(n).id for n in part.nodes}, key=order.__getitem__)
            local = [d.split("/", 1)[1] for d in used]
            # a part on one device needs no pins (and fuses freely); on several, each graph node is pinned
            mapping = {n.name: self._placement.of(n).local_id for n in part.nodes} if len(local) > 1 else None
            key = f"{self._prefix}-p{part.index}"
            jobs.append((part.node, actors[part.node], key, subgraph(graph, part, f"{graph.name}@{part.node}"),
                         local, mapping))
        self._jobs = [(actor, key) for _, actor, key, *_ in jobs]
        reports = self._prepare_all(jobs, True, "fill", record, fuse)
        self._memory = [(part.node, r["memory"]) for part, r in zip(self.parts, reports)]
        self._read = {id(v) for part in self.parts for v in part.inputs}

    def _submit(self, arrays: dict[int, np.ndarray], profile: bool, timeout: float | None) -> ClusterRun:
        r = ray()
        t0 = time.time()
        refs: dict[int, Any] = {id(v): r.put(arrays[id(v)]) for v in self.graph.inputs if id(v) in self._read}
        calls, stats = [], []
        for part, (actor, key) in zip(self.parts, self._jobs):
            out = actor.run.options(num_returns=len(part.exports) + 1).remote(
                key, [v.name for v in part.inputs], [refs[id(v)] for v in part.inputs], profile)
            for v, ref in zip(part.exports, out[:-1]):
                refs[id(v)] = ref
            calls.append(Call(part.node, part.first, out[-1]))
            stats.append(out[-1])
        outputs = {}
        for name, v in self.graph.outputs.items():
            if id(v) in refs:
                outputs[name] = [refs[id(v)]]
            else:  # an input or a constant given back as it is
                outputs[name] = [arrays[id(v)] if id(v) in arrays else v.constant]
        return ClusterRun(self, calls, outputs, stats, t0, timeout, profile)

    def placement_table(self) -> list[dict[str, str]]:
        p = self._placement
        return [{"node": n.name, "op": n.op, "device": p.of(n).id, "why": p.reason[id(n)]} for n in p.nodes]

    def transfer_table(self) -> list[dict[str, Any]]:
        made = {id(v): part for part in self.parts for v in part.exports}
        inputs = {id(v) for v in self.graph.inputs}
        moves, seen = [], set()
        for part in self.parts:
            for v in part.inputs:
                source = "driver" if id(v) in inputs else made[id(v)].node
                if source == part.node or (id(v), part.node) in seen:
                    continue
                seen.add((id(v), part.node))
                moves.append({"value": v.name, "kind": "input" if source == "driver" else "cross-node",
                              "source": source, "target": part.node, "bytes": _nbytes(self._types, v)})
        for name, v in self.graph.outputs.items():
            if id(v) in made:
                moves.append({"value": name, "kind": "output", "source": made[id(v)].node, "target": "driver",
                              "bytes": _nbytes(self._types, v)})
        return moves


class DataPlan(ClusterPlan):
    """The whole graph on every node.  The graph's batch (axis 0 of its inputs, ``batch``) is one part: a run of
    ``n * batch`` rows is cut into ``n`` parts, spread in contiguous runs over the nodes, and the outputs are
    gathered in order along axis 0.  Every node runs the graph with the shapes it was built for, so a graph
    whose shapes are fixed (an ONNX model's Reshape to a batch) runs as well as one that takes any batch."""

    parallel = "data"

    def __init__(self, connection: Any, graph: Graph, devices: Sequence[RemoteDevice],
                 explicit: Mapping[str, Any] | None, strict: bool, policy: str, record: bool, fuse: bool,
                 timeout: float | None) -> None:
        super().__init__(connection, graph, devices, timeout)
        nodes = graph.needed()
        types = infer_types(graph, nodes, {v.name: v.type for v in graph.inputs})
        self._check_batch(types)
        self._types = types
        actors = {s.name: s.actor for s in connection.nodes_now()}
        jobs = []
        for node in self.nodes:
            local = [d.local_id for d in self.devices if d.node == node]
            mapping = _explicit_for(node, explicit)
            jobs.append((node, actors[node], f"{self._prefix}-{node}", graph, local, mapping))
        self._jobs = [(node, actor, key) for node, actor, key, *_ in jobs]
        reports = self._prepare_all(jobs, strict, policy, record, fuse)
        self._memory = [(node, r["memory"]) for node, r in zip(self.nodes, reports)]
        self._tables = [[{**row, "device": f"{node}/{row['device']}"} for row in r["placement"]]
                        for node, r in zip(self.nodes, reports)]
        self._first = nodes[0].name if nodes else "?"

    def _check_batch(self, types: Mapping[int, Any]) -> None:
        if not self.graph.inputs:
            raise GraphError("parallel='data' splits the inputs' batch (axis 0) over the nodes; this graph has no "
                             "inputs")
        batches = {v.name: v.shape[0] if v.shape else None for v in self.graph.inputs}
        if None in batches.values() or len(set(batches.values())) != 1:
            raise GraphError(f"parallel='data' splits axis 0 of every input over the nodes; the inputs' first "
                             f"dimensions differ or are missing: {batches}")
        batch = next(iter(batches.values()))
        if batch < 1:
            raise GraphError("parallel='data' splits the inputs' batch (axis 0) over the nodes; the graph's batch is 0")
        self.batch = batch
        for name, v in self.graph.outputs.items():
            shape = types[id(v)].shape
            if not shape or shape[0] != batch:
                raise GraphError(f"parallel='data' gathers every output along axis 0; output {name!r} has shape "
                                 f"{shape}, not a batch of {batch}")

    def _submit(self, arrays: dict[int, np.ndarray], profile: bool, timeout: float | None) -> ClusterRun:
        r = ray()
        b = self.batch
        sizes = {v.name: arrays[id(v)].shape[0] for v in self.graph.inputs}
        if len(set(sizes.values())) != 1:
            raise InvalidArgument(f"parallel='data' splits axis 0 of every input; the inputs' batches differ: "
                                  f"{sizes}")
        rows = next(iter(sizes.values()))
        if rows < b or rows % b:
            raise InvalidArgument(f"parallel='data' runs the graph on parts of {b} row(s) (its batch); the inputs "
                                  f"have {rows} rows, not a positive multiple of {b}")
        count = rows // b
        bounds = np.linspace(0, count, min(len(self._jobs), count) + 1).astype(int)
        t0 = time.time()
        calls, stats, pieces = [], [], []
        names = [v.name for v in self.graph.inputs]
        for (node, actor, key), lo, hi in zip(self._jobs, bounds[:-1], bounds[1:]):
            for j in range(lo, hi):  # a node's parts run one after another there; the nodes at once
                refs = [r.put(arrays[id(v)][j * b:(j + 1) * b]) for v in self.graph.inputs]
                out = actor.run.options(num_returns=len(self.graph.outputs) + 1).remote(key, names, refs, profile)
                calls.append(Call(node, self._first, out[-1]))
                stats.append(out[-1])
                pieces.append(out[:-1])
        outputs = {name: [p[i] for p in pieces] for i, name in enumerate(self.graph.outputs)}
        return ClusterRun(self, calls, outputs, stats, t0, timeout, profile)

    def placement_table(self) -> list[dict[str, str]]:
        return [row for table in self._tables for row in table]

    def transfer_table(self) -> list[dict[str, Any]]:
        """What a run of one part per node moves (a run of more parts moves that much per part)."""
        moves = [{"value": v.name, "kind": "input", "source": "driver", "target": node,
                  "bytes": _nbytes(self._types, v)} for node in self.nodes for v in self.graph.inputs]
        moves += [{"value": name, "kind": "output", "source": node, "target": "driver",
                   "bytes": _nbytes(self._types, v)}
                  for node in self.nodes for name, v in self.graph.outputs.items()]
        return moves


def _nbytes(types: Mapping[int, Any], v: Value) -> int:
    t = types[id(v)]
    return int(t.size * t.dtype.itemsize)


def _explicit_for(node: str, explicit: Mapping[str, Any] | None) -> dict[str, str] | None:
    """The explicit placement one node's whole-graph plan takes: local ids as they are, a node-qualified id only
    on its node."""
    if not explicit:
        return None
    out = {}
    for key, target in explicit.items():
        target = getattr(target, "id", target)
        if isinstance(target, str) and "/" in target:
            where, _, local = target.partition("/")
            if where == node:
                out[key] = local
        else:
            out[key] = target
    return out or None


def compile_plan(connection: Any, graph: Graph, devices: Sequence[Any], explicit: Mapping[str, Any] | None,
                 strict: bool, policy: str, record: bool, fuse: bool, parallel: str,
                 timeout: float | None) -> ClusterPlan:
    """A ModelPlan or DataPlan of ``graph`` over ``devices`` (remote ones, or local ones meaning those of the
    driver's node)."""
    if timeout is not None and (not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0):
        raise InvalidArgument(f"compile: timeout must be a positive number of seconds, got {timeout!r}")
    remote = [d if connection.is_remote(d) else connection.local_as_remote(d) for d in devices]
    seen: set[str] = set()
    for d in remote:
        if d.id in seen:
            raise InvalidArgument(f"compile: device {d.id} is given twice")
        seen.add(d.id)
    by_id = {d.id: d for d in remote}
    pinned = None
    if explicit:
        pinned = {}
        for key, target in explicit.items():
            target = connection.resolve(target) if isinstance(target, str) and "/" in target else target
            if not connection.is_remote(target):
                from ..graph.remote import resolve

                target = connection.local_as_remote(resolve(target))
            pinned[key] = by_id.get(target.id, target)
    if parallel == "data":
        return DataPlan(connection, graph, remote, explicit, strict, policy, record, fuse, timeout)
    return ModelPlan(connection, graph, remote, pinned, strict, policy, record, fuse, timeout)

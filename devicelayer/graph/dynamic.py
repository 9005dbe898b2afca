"""Plans over symbolic shapes: a model specialised per signature of input shapes, split where it needs data.

A front end (the ONNX loader) describes a model as ``Stage``s.  A stage builds,
for the concrete types of what flows into it (and the contents of the inputs it
has learnt to need), a ``SegmentSpec``: a Graph of library ops with fixed
shapes, what it hands on, and, where the model needs a value computed at run
time (a shape read from a tensor, an If condition, the size NonZero gives), a
``Cut``.  A run executes a segment's compiled plan, does the cut's host work
(reads the values, runs a host function or a driver over sub-plans), and goes
on with the next stage.  Every stage caches its segments per signature (least
recently used, bounded); the hits and misses, and every wait on the host with
what it cost, are in the plan's report.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any, Callable, Sequence

import numpy as np

from ..casting import to_dtype
from ..device import Device, refuse_forked
from ..errors import GraphError, InvalidArgument
from ..interrupts import protected
from ..memory import is_masked
from ..tensors import Tensor
from .constants import ConstantStore
from .ir import Graph
from .lane import Lane, lane_inputs
from .profile import Profiled
from .run_guard import RunGuard


class PinInputs(Exception):
    """Raised by a stage builder that needs the contents of some of the stage's own inputs (by name)."""

    def __init__(self, names: Sequence[str]) -> None:
        super().__init__(f"needs the values of {list(names)}")
        self.names = list(names)


@dataclass
class Cut:
    """What happens between two segments, on the host.

    ``kind`` "values": read ``names`` (the next stage takes their contents as constants);
    "host": ``run`` maps the NumPy values of ``names`` to NumPy ``outputs``;
    "driver": ``run`` maps the values of ``names`` (Tensors, arrays, lists) to ``outputs`` (a loop over
    sub-plans, a branch chosen at run time).  ``then`` builds the next stage's segments.
    """

    kind: str
    names: list[str]
    what: str
    then: "Builder"
    run: Callable[..., Any] | None = None
    outputs: list[str] = field(default_factory=list)


@dataclass
class SegmentSpec:
    """One segment as a front end builds it: a graph of fixed shapes, what it hands on, the cut after it."""

    graph: Graph
    #: name handed on -> graph output name (a list for a sequence, None for an empty optional)
    outputs: dict[str, Any]
    #: names handed on whose values are known on the host (NumPy arrays, lists of them)
    constants: dict[str, Any] = field(default_factory=dict)
    cut: Cut | None = None


#: builds a stage's segment for the values flowing in (name -> array, Tensor, list, None) and the pinned ones
Builder = Callable[[Mapping[str, Any], Mapping[str, np.ndarray]], SegmentSpec]


@dataclass
class InputSpec:
    """A model input: name, dimensions (an int where fixed, a name or None where symbolic), dtype, kind."""

    name: str
    dims: tuple[Any, ...] | None
    dtype: np.dtype | None
    kind: str = "tensor"  # "tensor", "sequence" or "optional"


class Segment:
    """A built segment: its compiled plan (None where it has no device work) and the next stage."""

    def __init__(self, spec: SegmentSpec, plan: Any, next_stage: "Stage | None") -> None:
        self.spec = spec
        self.plan = plan
        self.next = next_stage

    def release(self) -> None:
        if self.plan is not None:
            self.plan.release()
            self.plan = None
        if self.next is not None:
            self.next.release()


class Stage:
    """A point where specialisation starts: a builder and its segments cached per signature."""

    def __init__(self, owner: "DynamicPlan", builder: Builder, pinned: Sequence[str] = ()) -> None:
        self.owner = owner
        self.builder = builder
        self.pinned: set[str] = set(pinned)
        self.segments: collections.OrderedDict[tuple, Segment] = collections.OrderedDict()

    def segment(self, values: Mapping[str, Any], pin: bool = True) -> tuple[Segment, dict[str, np.ndarray]]:
        """The segment for these values (built on a miss) and the pinned values it was built with; with ``pin``
        False, PinInputs where the stage needs the contents of an input it has not pinned yet."""
        owner = self.owner
        while True:
            pinned = {n: owner.host_value(values[n], f"input {n!r} of a stage") for n in sorted(self.pinned)
                      if n in values}
            key = signature(values, pinned)
            hit = self.segments.get(key)
            if hit is not None:
                self.segments.move_to_end(key)
                owner.stats["hits"] += 1
                return hit, pinned
            try:
                t0 = time.perf_counter()
                spec = self.builder(values, pinned)
            except PinInputs as need:
                if not pin:
                    raise
                unknown = [n for n in need.names if n not in values]
                if unknown or set(need.names) <= self.pinned:
                    raise GraphError(f"a stage asked for the values of {need.names}, which it cannot get") from None
                self.pinned.update(need.names)
                continue
            seg = Segment(spec, owner.compile_graph(spec.graph), None)
            if spec.cut is not None:
                pins = spec.cut.names if spec.cut.kind == "values" else ()
                seg.next = Stage(owner, spec.cut.then, pins)
            owner.stats["misses"] += 1
            owner.stats["prepare_seconds"] += time.perf_counter() - t0
            self.segments[key] = seg
            while len(self.segments) > owner.cache_size:
                _, old = self.segments.popitem(last=False)
                old.release()
                owner.stats["evictions"] += 1
            return seg, pinned

    def release(self) -> None:
        for seg in self.segments.values():
            seg.release()
        self.segments.clear()


def _type_key(x: Any) -> Any:
    if x is None:
        return None
    if isinstance(x, list):
        return ("seq",) + tuple(_type_key(e) for e in x)
    return (tuple(x.shape), np.dtype(x.dtype).str)


def signature(values: Mapping[str, Any], pinned: Mapping[str, np.ndarray]) -> tuple:
    """The cache key of a stage: every value's type, and the contents of the pinned ones."""
    key = []
    for name in sorted(values):
        if name in pinned:
            arr = pinned[name]
            key.append((name, "=", arr.dtype.str, arr.shape, arr.tobytes()))
        else:
            key.append((name, _type_key(values[name])))
    return tuple(key)


class DynamicPlan(Profiled):
    """A model compiled for every signature of input shapes it allows: ``plan(x=array)`` returns NumPy outputs,
    ``plan.run`` device Tensors; each signature is specialised once and cached (``cache_size`` per stage,
    least recently used first out)."""

    def __init__(self, builder: Builder, inputs: Sequence[InputSpec], outputs: Sequence[str], devices: Any,
                 placement: Mapping[str, Any] | None = None, strict: bool = False, policy: str = "fill",
                 record: bool = True, cache_size: int = 16, name: str = "model", fuse: bool = True,
                 allow_tf32: bool = False) -> None:
        from ..registry import device as find, devices as every

        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1:
            raise InvalidArgument(f"compile: cache_size must be a positive int, got {cache_size!r}")
        if isinstance(devices, str) and devices == "auto":
            self.devices: list[Device] = every()
        elif isinstance(devices, (list, tuple)):
            self.devices = [find(d) for d in devices]
        else:
            self.devices = [find(devices)]
        if not self.devices:
            raise GraphError("compile: no devices")
        self.name = name
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.cache_size = cache_size
        self._options = (dict(placement or {}), strict, policy, record)
        self.fuse = fuse
        if not isinstance(allow_tf32, bool):
            raise InvalidArgument(f"compile: allow_tf32 must be True or False, got {allow_tf32!r}")
        self.allow_tf32 = allow_tf32
        self.constants = ConstantStore()
        self.stats: dict[str, Any] = {"hits": 0, "misses": 0, "evictions": 0, "prepare_seconds": 0.0}
        self.waits: dict[str, dict[str, Any]] = {}  # what -> {"kind", "count", "bytes", "seconds"}
        self.root = Stage(self, builder)
        self.last_segments: list[Segment] = []
        self._busy = RunGuard()
        self._host_wait: list[float] = [0.0, 0]
        self._lane: Lane | None = None  # the path of more NumPy runs like the last (graph/lane.py)
        self._lane_segments: list[Segment] = []

    @property
    def options(self) -> dict[str, Any]:
        """The compile options (placement, strict, policy, record, cache_size, fuse, allow_tf32), for plans of
        subgraphs."""
        placement, strict, policy, record = self._options
        return {"placement": placement, "strict": strict, "policy": policy, "record": record,
                "cache_size": self.cache_size, "fuse": self.fuse, "allow_tf32": self.allow_tf32}

    # -- preparing ----------------------------------------------------------------------------------
    def compile_graph(self, graph: Graph) -> Any:
        """The ExecutionPlan of one segment's graph (None when it has no nodes to run)."""
        if not graph.nodes or not graph.outputs:
            return None
        placement, strict, policy, record = self._options
        present = {n.name for n in graph.nodes} | {n.op for n in graph.nodes}
        here = {k: v for k, v in placement.items() if k in present}
        return graph.compile(self.devices, placement=here, strict=strict, policy=policy, record=record,
                             constants=self.constants, fuse=self.fuse, allow_tf32=self.allow_tf32)

    def prepare(self, **inputs: Any) -> None:
        """Specialise (and cache) the first segment for inputs like these, without running it."""
        values = self._check_inputs(inputs)
        self.root.segment(values)

    def prepare_declared(self) -> bool:
        """Specialise the first segment for the inputs' declared shapes when every dimension is fixed and no input's
        contents are needed (the errors of placement and compilation then come at compile time, not at the first
        run); False where that cannot be done ahead."""
        values = {}
        for spec in self.inputs:
            if spec.kind != "tensor" or spec.dims is None or not all(isinstance(d, int) for d in spec.dims):
                return False
            values[spec.name] = np.zeros(spec.dims, spec.dtype)
        try:
            self.root.segment(values, pin=False)
        except PinInputs:
            return False
        return True

    # -- running ----------------------------------------------------------------------------------
    def __call__(self, profile: bool = False, **inputs: Any) -> dict[str, Any]:
        """Run with NumPy inputs (by name); returns every output as a NumPy array (a list for a sequence)."""
        return self.run_numpy(inputs, profile)

    def run_numpy(self, inputs: Mapping[str, Any], profile: bool = False) -> dict[str, Any]:
        """``plan(**inputs)`` with the inputs as a mapping (names that are not Python identifiers too)."""
        if not isinstance(inputs, Mapping):
            raise InvalidArgument(f"inputs must be a mapping of input name to array or Tensor, "
                                  f"got {type(inputs).__name__}")
        lane = self._lane
        if lane is not None and not profile:
            out = self._in_lane(lane, inputs)
            if out is not None:
                return out
        inputs = dict(inputs)
        out = self._locked(inputs, profile, to_numpy=True)
        self._lane = None if profile else self._lane_after(inputs)
        return out

    def run(self, inputs: Mapping[str, Any], profile: bool = False) -> dict[str, Any]:
        """Run with NumPy arrays or device Tensors; returns the outputs as Tensors (NumPy arrays where an output
        is known on the host; lists for sequences).  The caller owns the returned Tensors."""
        if not isinstance(inputs, Mapping):
            raise InvalidArgument(f"inputs must be a mapping of input name to array or Tensor, "
                                  f"got {type(inputs).__name__}")
        return self._locked(dict(inputs), profile, to_numpy=False)

    def _locked(self, inputs: dict[str, Any], profile: bool, to_numpy: bool) -> dict[str, Any]:
        refuse_forked(self.devices)  # (before the lock: a thread of the parent may have held it)
        if not self._busy.claim():
            raise GraphError("this plan is already running in another thread; plans run one at a time "
                             "(compile a second plan to run concurrently)")
        try:
            self._busy.running = True
            return self._run(self._check_inputs(inputs), profile, to_numpy)
        finally:
            self._busy.running = False
            self._busy.owner = None

    def _in_lane(self, lane: Lane, inputs: Mapping[str, Any]) -> dict[str, Any] | None:
        """A run through ``lane``; None where the full path must run (see graph/lane.py)."""
        refuse_forked(self.devices)  # (before the lock: a thread of the parent may have held it)
        if not self._busy.claim():
            return None
        try:
            self._busy.running = True
            out = lane.run(inputs)
            if out is not None:
                self.stats["hits"] += 1
                self.last_segments = self._lane_segments
            return out
        finally:
            self._busy.running = False
            self._busy.owner = None

    def _lane_after(self, inputs: Mapping[str, Any]) -> Lane | None:
        """The lane for NumPy runs like the one that just ran on ``inputs``: one segment, ending the model,
        built without reading an input's contents; None where the run was otherwise."""
        segments = self.last_segments
        if len(segments) != 1 or self.root.pinned:
            return None
        seg = segments[0]
        spec = seg.spec
        if seg.plan is None or spec.cut is not None or not hasattr(seg.plan, "lane_for"):
            return None
        if any(isinstance(g, list) for g in spec.outputs.values()) or any(i.kind != "tensor" for i in self.inputs):
            return None
        checks = lane_inputs(inputs)
        if checks is None:
            return None
        picks = [(name, spec.outputs[name] if name in spec.outputs else None, name not in spec.outputs)
                 for name in self.outputs]
        constants = dict(spec.constants)
        if any(constant and name not in constants for name, _, constant in picks):
            return None

        def outputs(produced: dict[str, Any]) -> dict[str, Any]:
            return {name: _to_numpy(constants[name]) if constant else None if g is None else produced[g]
                    for name, g, constant in picks}

        self._lane_segments = [seg]
        return seg.plan.lane_for(inputs, checks, outputs)

    def _run(self, values: dict[str, Any], profile: bool, to_numpy: bool) -> dict[str, Any]:
        fed = {id(x) for x in _leaves(values) if isinstance(x, Tensor)}
        owned: dict[int, Tensor] = {}  # Tensors made by segments (freed once nothing needs them)
        stage: Stage | None = self.root
        segments: list[Segment] = []
        try:
            while stage is not None:
                seg, pinned = stage.segment(values)
                segments.append(seg)
                out = self._execute(seg, values, pinned, profile, to_numpy and seg.spec.cut is None, owned, fed)
                cut = seg.spec.cut
                if cut is None:
                    results = {name: out[name] for name in self.outputs}
                    break
                values = self._cross(cut, out)
                _own(owned, values, fed)
                stage = seg.next
            self.last_segments = segments
            if to_numpy:
                results = {name: _to_numpy(x) for name, x in results.items()}
                keep: set[int] = set()
            else:
                keep = {id(t) for t in _leaves(results) if isinstance(t, Tensor)}
        except BaseException:  # a failure or a Ctrl-C: nothing made by the run is kept
            _free(owned.values())
            raise
        _free(t for i, t in owned.items() if i not in keep)
        return results

    def _execute(self, seg: Segment, values: Mapping[str, Any], pinned: Mapping[str, np.ndarray],
                 profile: bool, to_numpy: bool, owned: dict[int, Tensor], fed: set[int]) -> dict[str, Any]:
        """Run one segment: its plan on the values flowing in; returns what it hands on, by name (NumPy arrays
        for the plan's outputs with ``to_numpy``, else Tensors).  The Tensors it makes go into ``owned``."""
        spec = seg.spec
        feeds: dict[str, Any] = {}
        for v in spec.graph.inputs:
            name, _, index = v.name.partition("#")
            x = values[name]
            feeds[v.name] = x[int(index)] if index else x
        if seg.plan is None:  # no nodes: the outputs are inputs or constants
            produced: dict[str, Any] = {name: feeds[v.name] if v.constant is None else v.constant
                                        for name, v in spec.graph.outputs.items()}
        elif to_numpy:
            produced = seg.plan.run_numpy(feeds, profile=profile)
        else:
            produced = seg.plan.run(feeds, profile=profile)
            _own(owned, produced, fed)
        out: dict[str, Any] = dict(spec.constants)

        for name, g in spec.outputs.items():
            if g is None:
                out[name] = None
            elif isinstance(g, list):
                out[name] = [produced[e] for e in g]
            else:
                out[name] = produced[g]
        for name, arr in pinned.items():
            out.setdefault(name, arr)
        return out

    def _cross(self, cut: Cut, out: dict[str, Any]) -> dict[str, Any]:
        """The host work of a cut: what flows into the next stage."""
        t0 = time.perf_counter()
        if cut.kind == "values":
            values = dict(out)
            for n in cut.names:
                values[n] = self.host_value(out[n], cut.what)
            nbytes = sum(values[n].nbytes for n in cut.names)
        elif cut.kind == "host":
            args = [self.host_value(out[n], cut.what) for n in cut.names]
            results = cut.run(args)
            values = dict(out)  # (the host function's inputs may be read again later)
            values.update(zip(cut.outputs, results))
            nbytes = sum(a.nbytes for a in args)
        else:
            results = cut.run({n: out[n] for n in cut.names}, self)
            values = dict(out)
            values.update(zip(cut.outputs, results))
            nbytes = 0
        rec = self.waits.setdefault(cut.what, {"kind": cut.kind, "count": 0, "bytes": 0, "seconds": 0.0})
        rec["count"] += 1
        rec["bytes"] += int(nbytes)
        rec["seconds"] += time.perf_counter() - t0
        return values

    def host_value(self, x: Any, what: str) -> np.ndarray:
        """``x`` as a NumPy array (a Tensor is read back: a wait on the host)."""
        if isinstance(x, Tensor):
            return x.numpy()
        if isinstance(x, np.ndarray):
            return x
        if isinstance(x, np.generic):
            return np.asarray(x)
        raise GraphError(f"{what}: expected a tensor, got {type(x).__name__}")

    def _check_inputs(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        return check_inputs(self.inputs, inputs)

    # -- reports -----------------------------------------------------------------------------------
    def cache_info(self) -> dict[str, Any]:
        """Specialisations: ``hits``, ``misses``, ``evictions``, ``prepare_seconds``, cached ``size``, ``max``."""
        return {**self.stats, "size": _count(self.root), "max": self.cache_size}

    def waits_report(self) -> list[dict[str, Any]]:
        """Each place a run waits on the host: what, the kind of cut, how often, bytes read, seconds spent."""
        return [{"what": what, **rec} for what, rec in self.waits.items()]

    def _plans(self) -> list[Any]:
        segs = self.last_segments or ([] if not self.root.segments else [next(iter(self.root.segments.values()))])
        return [s.plan for s in segs if s.plan is not None]

    def kernel_counts(self) -> dict[str, int]:
        """Kernel launches per run of the segments of the last run, ``before`` and ``after`` fusion."""
        counts = [p.kernel_counts() for p in self._plans()]
        return {k: sum(c[k] for c in counts) for k in ("before", "after")}

    def placement_report(self) -> str:
        """The placement of each segment of the last run, the specialisation cache and the host waits."""
        plans = self._plans()
        parts = []
        for i, p in enumerate(plans):
            head = f"segment {i + 1} of {len(plans)}\n" if len(plans) > 1 else ""
            parts.append(head + p.placement_report())
        info = self.cache_info()
        parts.append(f"specialisations: {info['size']} cached (at most {info['max']} per stage), "
                     f"{info['hits']} hits, {info['misses']} misses, {info['evictions']} evicted, "
                     f"{info['prepare_seconds'] * 1e3:.1f} ms preparing")
        for w in self.waits_report():
            per = w["seconds"] / max(w["count"], 1) * 1e6
            parts.append(f"host wait ({w['kind']}): {w['what']}: {w['count']} times, {w['bytes']} bytes read, "
                         f"{per:.0f} us each")
        return "\n".join(parts)

    def placement_table(self) -> list[dict[str, str]]:
        """Each node of the last run's segments with its op, device and the reason it went there."""
        return [row for p in self._plans() for row in p.placement_table()]

    @property
    def transfers(self) -> int:
        """Device-to-device copies the last run's segments make."""
        return sum(p.transfers for p in self._plans())

    def memory_report(self) -> dict[str, dict[str, int]]:
        """Per device: the largest arena ``peak``, ``lower_bound`` and ``no_reuse`` over the last run's segments,
        and the ``constants`` shared by every specialisation."""
        out: dict[str, dict[str, int]] = {}
        for p in self._plans():
            for dev, rep in p.memory_report().items():
                cur = out.setdefault(dev, {"peak": 0, "lower_bound": 0, "no_reuse": 0})
                for k in cur:
                    cur[k] = max(cur[k], rep[k])
        for rep in out.values():
            rep["constants"] = self.constants.nbytes
        return out

    @property
    def last_profile(self) -> list[dict[str, Any]] | None:
        plans = [p for p in self._plans() if p.last_profile]
        if not plans:
            return None
        return [r for p in plans for r in p.last_profile]



    def release(self) -> None:
        """Free every cached specialisation and the shared constants."""
        self._lane = None
        self.root.release()
        self.last_segments = []


def check_inputs(specs: Sequence[InputSpec], inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The feeds as arrays, Tensors, lists or None, checked against the model's inputs: names, dtypes, ranks,
    fixed dimensions and symbolic dimensions that must agree."""
    expected = {i.name: i for i in specs}
    unknown = sorted(set(inputs) - set(expected))
    if unknown:
        raise InvalidArgument(f"unknown input(s) {unknown}; the model takes {sorted(expected)}")
    missing = sorted(n for n, spec in expected.items() if n not in inputs and spec.kind != "optional")
    if missing:
        raise InvalidArgument(f"missing input(s) {missing}")
    values: dict[str, Any] = {}
    sizes: dict[str, tuple[int, str]] = {}
    for name, spec in expected.items():
        x = inputs.get(name)
        if spec.kind == "optional" and x is None:
            values[name] = None
            continue
        if spec.kind == "sequence" or isinstance(x, (list, tuple)):
            if not isinstance(x, (list, tuple)):
                raise InvalidArgument(f"input {name!r} is a sequence: give a list of arrays")
            values[name] = [_as_input(e, spec, f"{name}[{i}]", None) for i, e in enumerate(x)]
            continue
        values[name] = _as_input(x, spec, name, sizes)
    return values


def _count(stage: Stage) -> int:
    return sum(1 + (_count(s.next) if s.next is not None else 0) for s in stage.segments.values())


def _as_input(x: Any, spec: InputSpec, name: str, sizes: dict[str, tuple[int, str]] | None) -> Any:
    """One feed as an array or a Tensor, checked against the input's dtype and dimensions."""
    if isinstance(x, Tensor):
        x.buffer.check_alive(f"input {name!r}")
        shape, dtype = x.shape, x.dtype
    else:
        if is_masked(x):
            raise InvalidArgument(f"input {name!r}: a masked array (give np.ma.filled(x) or x.data)")
        if not isinstance(x, np.ndarray):
            try:
                x = np.asarray(x) if spec.dtype is None else to_dtype(x, spec.dtype, f"input {name!r}")
            except (TypeError, ValueError) as exc:
                if isinstance(exc, InvalidArgument):
                    raise
                raise InvalidArgument(f"input {name!r}: cannot convert to an array: {exc}") from None
        if x.dtype.kind == "c":
            raise InvalidArgument(f"input {name!r}: {x.dtype} values are not supported (complex numbers)"
                                  + (f"; the input is {spec.dtype}" if spec.dtype is not None else ""))
        if not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)
        shape, dtype = x.shape, x.dtype
    if spec.dtype is not None and dtype != spec.dtype:
        raise InvalidArgument(f"input {name!r} must be {spec.dtype}, got {dtype}")
    if spec.dims is not None and sizes is not None:
        expected = tuple("?" if d is None else d for d in spec.dims)
        if len(shape) != len(spec.dims):
            raise InvalidArgument(f"input {name!r} must have shape {expected} (rank {len(spec.dims)}), "
                                  f"got {tuple(shape)}")
        for k, (d, s) in enumerate(zip(spec.dims, shape)):
            if isinstance(d, int) and d != s:
                raise InvalidArgument(f"input {name!r} must have shape {expected}: dimension {k} is fixed to {d}, "
                                      f"got {tuple(shape)}")
            if isinstance(d, str):
                seen = sizes.setdefault(d, (int(s), name))
                if seen[0] != s:
                    raise InvalidArgument(f"input {name!r} has {d} = {s} (dimension {k} of {tuple(shape)}), but input "
                                          f"{seen[1]!r} has {d} = {seen[0]}")
    return x


def _leaves(x: Any) -> list[Any]:
    if isinstance(x, dict):
        return [leaf for v in x.values() for leaf in _leaves(v)]
    if isinstance(x, list):
        return [leaf for v in x for leaf in _leaves(v)]
    return [x]


@protected
def _own(owned: dict[int, Tensor], values: Mapping[str, Any], fed: set[int]) -> None:
    """Add the Tensors among ``values`` that were not fed to the run to ``owned`` (freed at its end)."""
    for t in _leaves(values):
        if isinstance(t, Tensor) and id(t) not in fed:
            owned[id(t)] = t


@protected
def _free(tensors: Any) -> None:
    seen = set()
    for t in tensors:
        buf = t.buffer
        if id(buf) in seen or buf.base is not None or buf.freed:
            continue
        seen.add(id(buf))
        t.device.pool.free(buf, wait=[t.ready])


def _to_numpy(x: Any) -> Any:
    if isinstance(x, Tensor):
        return x.numpy()  # a segment's Tensor is freed with the others; a fed one stays the caller's
    if isinstance(x, list):
        return [_to_numpy(e) for e in x]
    if x is None:
        return None
    return np.asarray(x)

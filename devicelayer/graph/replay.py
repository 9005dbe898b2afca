"""Recorded plans: each run of consecutive nodes on one device is one recording, replayed as one submission.

Inputs and outputs get buffers of their own, bound once, so every argument is
fixed and a run is: upload the inputs, replay the recordings (with the copies
between devices in between), read the outputs.  NumPy inputs and outputs pass
through host arrays of the device's own (pinned memory), copied on the
caller's thread, so each transfer is one DMA with no host step on the device's
timeline.  Where those arrays may outlive the device, a large output is
downloaded straight into one that the caller keeps (``Replay.lend``), and a
large input already in such memory is uploaded from where it lies.
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from ..device import Device
from ..errors import DeviceLayerError, GraphError
from ..events import Event
from ..hostcopy import copy_into
from ..interrupts import protected
from ..kernels.op import get
from ..kernels.runner import record
from ..memory import Buffer
from ..recording import Recording
from ..tensors import Tensor
from ..transfer import copy_between
from .ir import Node
from .memory import nbytes as _nbytes

#: outputs of at least this many bytes come back in pinned arrays of their own where the device lends them
#: (``Replay.lend``): copying 5.6 MB out of a staging array took 0.2-0.45 ms on an H200 machine, its DMA 0.11
LEND_LEAST = 1 << 18
#: pinned arrays an output may have handed out at once: ``y = plan(x)`` holds the last while the next is made
LENT_ARRAYS = 2


def _root(a: np.ndarray) -> np.ndarray:
    """The array every view of ``a`` references (NumPy points a view's base at it: the first array down the chain
    of bases that owns its memory or whose base is not an array)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _counts(pair: tuple[np.ndarray, np.ndarray]) -> tuple[int, int]:
    """``sys.getrefcount`` of a lent array and of its root, counted as ``Replay.lend`` counts them."""
    out, root = pair
    return sys.getrefcount(out), sys.getrefcount(root)


#: the counts of a lent array nothing but its pair holds: where it is its own root, and where it is a view of it
#: (measured on this interpreter, the way ``lend`` counts)
_UNREFERENCED = {True: _counts((lambda a: (a, _root(a)))(np.empty(4))),
                 False: _counts((lambda a: (a, _root(a)))(np.empty(4).reshape(2, 2)))}


@dataclass
class Segment:
    """Consecutive nodes of one device, recorded together."""

    device: Device
    nodes: list[Node] = field(default_factory=list)
    reads: list[tuple[int, int]] = field(default_factory=list)  # (value, device) keys made outside the segment
    readers: dict[tuple[int, int], Node] = field(default_factory=dict)  # each read's first reader (for errors)
    writes: list[tuple[int, int]] = field(default_factory=list)
    recording: Recording | None = None


@dataclass
class Direct:
    """A replay whose work is all one device's, in memory the host addresses (``pool.maps_host_memory``): NumPy
    inputs are copied into their bound buffers and outputs out of theirs on the caller's thread, around the one
    submission of the recording, with no transfer submitted (``run_direct``)."""

    segment: Segment
    inputs: list[tuple[int, np.ndarray]]  # (value id, the bound buffer as an array of the input's type)
    outputs: list[tuple[str, np.ndarray]]  # (output name, the bound buffer as an array of the output's type)
    #: the last submission: a run returning Tensors leaves its work in flight, which the next run's copies wait for
    last: Event | None = None


@dataclass
class Replay:
    """A prepared plan in recorded form: bound input/output buffers and the work in submission order."""

    io: dict[tuple[int, int], Buffer]
    bufs: dict[tuple[int, int], Buffer]  # every (value, device) buffer: arena views and the bound ones
    work: list[Any]  # Steps ("input", "copy") and Segments, in order
    outputs: dict[str, tuple[Any, Device]]  # output name -> (value, device holding it)
    #: (value, device) -> the device's host array (pinned where it can be) that NumPy inputs and outputs pass
    #: through, and the last transfer from or into it
    staging: dict[tuple[int, int], tuple[np.ndarray, Event | None]] = field(default_factory=dict)
    direct: Direct | None = None  # where the work is one device's in host-addressed memory
    #: (value, device) -> the pinned arrays of an output handed to callers (``lend``), at most ``LENT_ARRAYS``, each
    #: with its root (``_root``)
    lent: dict[tuple[int, int], list[tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)

    def lend(self, key: tuple[int, int], dev: Device, t: Any) -> np.ndarray | None:
        """A pinned host array for an output that the run downloads into and hands to its caller (no copy out of
        a staging array): one handed out before that nothing references any more, else a new one while the output
        has fewer than ``LENT_ARRAYS``; None where the caller still holds them all, or the pool's host arrays may
        not outlive the device (``MemoryPool.lends_host_arrays``)."""
        if not dev.pool.lends_host_arrays:
            return None
        pairs = self.lent.setdefault(key, [])
        for pair in pairs:  # (a caller's view of one references its root)
            held, free = _counts(pair), _UNREFERENCED[pair[0] is pair[1]]
            if held[0] <= free[0] and held[1] <= free[1]:
                return pair[0]
        if len(pairs) >= LENT_ARRAYS:
            return None
        a = dev.pool.host_array(t.shape, t.dtype)
        pairs.append((a, _root(a)))
        return a

    def stage(self, key: tuple[int, int], dev: Device, t: Any) -> np.ndarray | None:
        """The staging host array of an input or output (made on first use, free for the caller once the last
        transfer through it is done); None where the device's host arrays are plain NumPy arrays."""
        if not dev.pool.pinned_host_arrays:
            return None
        found = self.staging.get(key)
        if found is None:
            found = self.staging[key] = (dev.pool.host_array(t.shape, t.dtype), None)
        array, last = found
        if last is not None:
            last.wait()
        return array

    def release(self) -> None:
        """Free the bound buffers, the recordings and the staging arrays (arrays lent to callers stay theirs)."""
        self.staging.clear()
        self.lent.clear()
        for item in self.work:
            if isinstance(item, Segment) and item.recording is not None and not item.recording.released:
                item.recording.release()
        for buf in self.io.values():
            if not buf.freed:
                buf.pool.free(buf)
        self.io.clear()


def build(prepared: Any, graph: Any) -> Replay:
    """Record ``prepared`` (a plan's Prepared): bind input/output buffers, record each same-device run of nodes."""
    types = prepared.types
    bufs = dict(prepared.bufs)
    io: dict[tuple[int, int], Buffer] = {}
    by_id = {id(d): d for d in prepared.devices}
    try:
        for key, buf in prepared.bufs.items():
            if buf is None:
                t = types[key[0]]
                io[key] = bufs[key] = by_id[key[1]].pool.allocate(_nbytes(t), t.dtype)
        steps = [s for s in prepared.steps if s.kind == "input"] + \
                [s for s in prepared.steps if s.kind in ("copy", "node")]
        work: list[Any] = []
        for s in steps:
            if s.kind != "node":
                work.append(s)
                continue
            seg = work[-1] if work and isinstance(work[-1], Segment) and work[-1].device is s.device else None
            if seg is None:
                seg = Segment(s.device)
                seg.recording = s.device.record()
                work.append(seg)
            _record_node(seg, s, types, bufs, prepared.temps)
        for item in work:
            if isinstance(item, Segment):
                item.recording.finish()
    except DeviceLayerError as exc:
        for buf in io.values():
            buf.pool.free(buf)
        raise GraphError(f"recording the plan failed: {exc}") from exc
    outputs = {}
    for name, v in graph.outputs.items():
        home = next((s.device for s in prepared.steps if s.kind == "output" and s.value is v), None)
        outputs[name] = (v, home)
    replay = Replay(io, bufs, work, outputs)
    replay.direct = _direct(replay, types)
    return replay


def _direct(replay: Replay, types: Mapping[int, Any]) -> Direct | None:
    """The replay's ``Direct`` form where one segment of a host-addressed device does all of its work, reading
    only inputs uploaded to it and making every output; else None."""
    segments = [w for w in replay.work if isinstance(w, Segment)]
    if len(segments) != 1 or not segments[0].device.pool.maps_host_memory:
        return None
    seg = segments[0]
    dev = seg.device
    if any(not isinstance(w, Segment) and (w.kind != "input" or w.device is not dev) for w in replay.work):
        return None
    if any(home is not dev for _, home in replay.outputs.values()):
        return None

    def array(v_id: int) -> np.ndarray:
        t = types[v_id]
        buf = replay.io[(v_id, id(dev))]
        return dev.pool.host_view(buf)[:t.size * t.dtype.itemsize].view(t.dtype).reshape(t.shape)

    inputs = [(id(w.value), array(id(w.value))) for w in replay.work if not isinstance(w, Segment)]
    outputs = [(name, array(id(v))) for name, (v, _) in replay.outputs.items()]
    return Direct(seg, inputs, outputs)


def run_direct(direct: Direct, feeds: Mapping[int, Any], node_events: list[tuple[Node, Event]]) -> dict[str, Any]:
    """One run of a ``Direct`` replay on NumPy feeds (each of its input's type), as NumPy arrays by output name;
    appends each node's event."""
    if direct.last is not None and not direct.last.done:
        direct.last.wait()
    for v_id, arr in direct.inputs:
        copy_into(arr, feeds[v_id])
    seg = direct.segment
    ev = direct.last = seg.recording.replay()
    node_events.extend(zip(seg.nodes, itertools.repeat(ev)))
    ev.wait()
    return {name: arr.copy() for name, arr in direct.outputs}


def _record_node(seg: Segment, step: Any, types: Mapping[int, Any], bufs: Mapping[tuple[int, int], Buffer],
                 temps: Mapping[int, list[Buffer]]) -> None:
    node, dev = step.node, step.device
    written = set(seg.writes)
    in_keys = [(id(v), id(dev)) for v in node.inputs]
    for k, v in zip(in_keys, node.inputs):
        if v.constant is None and k not in written and k not in seg.reads:
            seg.reads.append(k)
            seg.readers[k] = node
    out_bufs = [bufs[(id(v), id(dev))] for v in node.outputs]
    rec = seg.recording
    record(rec, get(node.op), step.op_plan, *step.op_types(types), node.attrs, [bufs[k] for k in in_keys], out_bufs,
           temps.get(id(node), []), step.compiled, f"node {node.name!r} ({node.op})")
    for i, j in step.copies:
        n = types[id(node.outputs[j])].size * types[id(node.outputs[j])].dtype.itemsize
        if n:
            rec.copy(out_bufs[j].view(0, n, np.uint8), bufs[in_keys[i]].view(0, n, np.uint8),
                     label=f"node {node.name!r} ({node.op})")
    seg.nodes.append(node)
    seg.writes.extend((id(v), id(dev)) for v in node.outputs)


def run(replay: Replay, feeds: Mapping[int, Any], types: Mapping[int, Any], to_numpy: bool,
        devices: list[Device], node_events: list[tuple[Node, Event]],
        submitted: Callable[[], None] | None = None) -> dict[str, Any]:
    """One run: NumPy arrays (``to_numpy``) or caller-owned Tensors by output name; appends each node's event.
    ``submitted`` is called once all the run's work is queued, before its outputs are waited for (to queue reads
    of the run's own, such as its flags, behind it)."""
    direct = replay.direct
    if direct is not None:
        if to_numpy and all(type(x) is np.ndarray for x in feeds.values()):
            return run_direct(direct, feeds, node_events)
        # (this run's transfers are submitted in order behind the direct runs' work, which they then follow)
    ready: dict[tuple[int, int], Event] = {}
    last: dict[int, Event] = {}

    def after(*devs: Device) -> list[Event]:
        return [last[id(d)] for d in devs if id(d) in last]

    io = replay.io
    for item in replay.work:
        if isinstance(item, Segment):
            dev = item.device
            waits = [ready[k] for k in item.reads if k in ready]
            # a failed input is blamed on the node that reads it, not on the segment's first node
            node_events.extend((item.readers[k], ready[k]) for k in item.reads if k in ready)
            ev = item.recording.replay(waits + after(dev))
            for k in item.writes:
                ready[k] = ev
            last[id(dev)] = ev
            node_events.extend((n, ev) for n in item.nodes)
            continue
        dev, v = item.device, item.value
        key = (id(v), id(dev))
        n = types[id(v)].size * types[id(v)].dtype.itemsize
        if not n:
            continue
        if item.kind == "input":
            x = feeds[id(v)]
            dst = io[key].view(0, n)
            if isinstance(x, Tensor):
                ready[key] = copy_between(dst.view(0, n, np.uint8), x.buffer.view(0, n, np.uint8),
                                          [x.ready] + after(dev))
            elif to_numpy and n >= LEND_LEAST and dev.pool.is_host_array(x):
                # the caller's array is of the pool's own fast kind (an output lent by a run, say): one DMA from it,
                # no staging copy (the run returns once the work behind the DMA is done, so the array is free then)
                ready[key] = dev.pool.upload(dst.view(0, n, x.dtype), x.reshape(-1), after(dev))
            elif (stage := replay.stage(key, dev, types[id(v)])) is not None:
                # copied here, on the caller's thread, then one DMA from pinned memory
                copy_into(stage, np.asarray(x).reshape(stage.shape))
                ready[key] = dev.pool.upload(dst.view(0, n, stage.dtype), stage.reshape(-1), after(dev))
                replay.staging[key] = (stage, ready[key])
            else:
                ready[key] = dev.pool.upload(dst.view(0, n, x.dtype), x, after(dev))
            last[id(dev)] = ready[key]
        else:  # copy between devices
            src_key = (id(v), id(item.source))
            ready[key] = copy_between(replay.bufs[key].view(0, n, np.uint8), replay.bufs[src_key].view(0, n, np.uint8),
                                      [e for e in [ready.get(src_key)] if e is not None] + after(dev, item.source))
            last[id(dev)] = last[id(item.source)] = ready[key]
    if submitted is not None:
        submitted()
    results = _collect(replay, feeds, types, ready, to_numpy, devices)
    if direct is not None:  # the next direct run's copies wait for this run's last work on the device
        made = [t.ready for t in results.values() if isinstance(t, Tensor) and t.ready is not None]
        direct.last = made[-1] if made else last.get(id(direct.segment.device))
    return results


def _collect(replay: Replay, feeds: Mapping[int, Any], types: Mapping[int, Any],
             ready: dict[tuple[int, int], Event], to_numpy: bool, devices: list[Device]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    try:
        return _collect_into(results, replay, feeds, types, ready, to_numpy, devices)
    except BaseException:  # (a Ctrl-C too) the Tensors made here go with the run
        _free_made(results, feeds)
        raise


@protected
def _free_made(results: Mapping[str, Any], feeds: Mapping[int, Any]) -> None:
    """Free the output Tensors ``_collect`` made (not inputs returned as they are)."""
    fed = {id(x) for x in feeds.values()}
    for t in results.values():
        if isinstance(t, Tensor) and id(t) not in fed and t.buffer.base is None and not t.buffer.freed:
            t.device.pool.free(t.buffer)


@protected
def _output_tensor(results: dict[str, Any], name: str, home: Device, src: Buffer, t: Any,
                   waits: list[Event]) -> None:
    """``results[name]``: a Tensor of its own holding a copy of the output in ``src``."""
    n = t.size * t.dtype.itemsize
    buf = home.pool.allocate(_nbytes(t), t.dtype)
    try:
        ev = home.pool.copy(buf.view(0, n, np.uint8), src.view(0, n, np.uint8), waits) if n else None
    except BaseException:
        home.pool.free(buf)
        raise
    results[name] = Tensor(buf, t.shape, t.dtype, ev)


def _collect_into(results: dict[str, Any], replay: Replay, feeds: Mapping[int, Any], types: Mapping[int, Any],
                  ready: dict[tuple[int, int], Event], to_numpy: bool, devices: list[Device]) -> dict[str, Any]:
    from .plan import _host_tensor

    pending: list[Event] = []
    staged: list[tuple[np.ndarray, np.ndarray]] = []  # (user array, staging array) copied once downloaded
    for name, (v, home) in replay.outputs.items():
        t = types[id(v)]
        if home is None:  # an input or constant returned as is
            x = feeds.get(id(v), v.constant)
            if to_numpy:
                results[name] = x.numpy() if isinstance(x, Tensor) else np.array(x)
            else:
                results[name] = x if isinstance(x, Tensor) else _host_tensor(np.array(x), devices)
            continue
        key = (id(v), id(home))
        src = replay.io[key]
        n = t.size * t.dtype.itemsize
        waits = [ready[key]] if key in ready else []
        if to_numpy:
            out = replay.lend(key, home, t) if n >= LEND_LEAST else None
            if out is not None:  # downloaded straight into an array the caller gets
                pending.append(home.pool.download(src.view(0, n, t.dtype), out.reshape(-1), waits))
                results[name] = out
                continue
            out = np.empty(t.shape, t.dtype)
            stage = replay.stage(key, home, t) if n else None
            if stage is not None:  # one DMA into pinned memory, copied out here once it is done
                pending.append(home.pool.download(src.view(0, n, t.dtype), stage.reshape(-1), waits))
                staged.append((out, stage))
            elif n:
                pending.append(home.pool.download(src.view(0, n, t.dtype), out.reshape(-1), waits))
            results[name] = out
        else:
            _output_tensor(results, name, home, src, t, waits)
    for e in pending:
        e.wait()
    for out, stage in staged:
        copy_into(out, stage)
    return results

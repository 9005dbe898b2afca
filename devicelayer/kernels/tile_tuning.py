"""Kernel shapes of products and convolutions measured once per device and op geometry, kept in the disk cache.

A plan's products and convolutions run on the tiled kernels (``ops/matmul.py``) with 32 x 32, 64 x 64 or 128 x 128
output tiles per work-group, or, on CPU devices, on the register-blocked kernels (``tiles.REGISTER``).  Which is
fastest depends on the device and the geometry (a CPU device's registers, a GPU's compute units against the number
of tiles, the depth of the product), so the first plan that meets a geometry of at least ``MIN_WORK``
multiply-adds times the op once with each edge the device's shared memory takes (``tiles.MICRO_EDGES``; a tiled
convolution also with the rectangular micro-tiles, ``tiles.WIDE_TILES``), and with
the register-blocked kernels where they are the static rule, on scratch tensors of the call's types, and keeps the
fastest; a later plan, in this process or another on the same device, driver and API, takes the stored choice
without timing (``devicelayer.tuning``).  The static rule (``register_kernels``, ``micro_tile``) stays unless
another shape is faster by more than ``MARGIN``.

Timing is on for GPUs.  On CPU devices (PoCL, lavapipe) the static rule was itself measured there, while compiling
and timing each shape multiplied the first compile of a CNN several times over: they time with
``DEVICELAYER_TUNE=all``.  ``DEVICELAYER_TUNE=0`` turns timing off everywhere.  Without timing a plan takes a
stored choice, else the static rule.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..device import Device
from ..errors import DeviceLayerError
from . import tiles
from .op import Op, Plan, TensorType
from .runner import _freeze, execute, programs

#: the least multiply-adds of a tiled launch that the tuner times (smaller ones keep the static rule)
MIN_WORK = 1 << 24
#: another edge replaces the static rule's only when faster by more than this fraction
MARGIN = 0.05
#: timed runs per edge (after one warm-up run, which also compiles), the fastest counted
TIMED_RUNS = 3
#: where the choices are kept (``Device._tuned``)
KIND = "tiles"
_OFF = ("0", "off", "no", "false")


def enabled(device: Device) -> bool:
    """Whether plans time tile shapes they have no stored choice for on ``device`` (``DEVICELAYER_TUNE``: GPUs
    by default, every device with ``all``, none with ``0``)."""
    value = os.environ.get("DEVICELAYER_TUNE", "").strip().lower()
    if value in _OFF:
        return False
    return value == "all" or device.info.device_type == "gpu"


def key_of(op: Op, ins: Sequence[TensorType], outs: Sequence[TensorType], attrs: Mapping[str, Any]) -> str:
    """The stored choice's key: the op, its tensor types and attributes."""
    return repr((op.name, [(tuple(t.shape), t.dtype.str) for t in ins], [(tuple(t.shape), t.dtype.str) for t in outs],
                 _freeze(dict(attrs))))


def tuned_plan(op: Op, device: Device, ins: Sequence[TensorType], outs: Sequence[TensorType],
               attrs: dict[str, Any], replan: Callable[[], Plan], tune: bool | None = None) -> Plan:
    """The op's plan on ``device`` (``replan()`` makes it) with its products and convolutions on the stored or
    measured kernel shape; the plan of the static rule where it has no such launch of ``MIN_WORK`` multiply-adds or
    more, where the device takes one shape only, or where nothing is stored and timing is off (``tune``; default
    ``enabled(device)``)."""
    with tiles.noting() as work:
        plan = replan()
    if not isinstance(device, Device) or device.info.kernel_language == "python" or not work or max(work) < MIN_WORK:
        return plan
    default = edge_of(plan)
    candidates = ([e for e in tiles.MICRO_EDGES + tiles.WIDE_TILES if _takes(replan, e)]
                  + ([tiles.REGISTER] if default == tiles.REGISTER else []))
    if len(candidates) < 2:
        return plan
    key = key_of(op, ins, outs, attrs)
    choices = device._tuned(KIND)
    stored = choices.get(key)
    shape = stored.get("micro") if isinstance(stored, dict) else None
    shape = tuple(shape) if isinstance(shape, list) else shape  # (a rectangular micro-tile, kept as a JSON list)
    if shape in candidates:
        return forced_plan(replan, shape)
    if not (enabled(device) if tune is None else tune):
        return plan
    times = {e: time_plan(op, device, ins, outs, attrs, forced_plan(replan, e)) for e in candidates}
    best = choose(times, default)
    if best is None:
        return plan
    measured = {str(e): (round(t * 1e3, 4) if math.isfinite(t) else None) for e, t in times.items()}
    if " at 0x" not in key:  # (an attribute without a stable form: the choice lives in this process only)
        choices.put(key, {"micro": best, "static": default, "times_ms": measured})
    return forced_plan(replan, best)


def choose(times: Mapping[tiles.Shape, float], default: tiles.Shape | None) -> tiles.Shape | None:
    """The shape to keep from seconds by shape (inf where it failed): the fastest, unless the static rule's
    ``default`` is within ``MARGIN`` of it; None where every shape failed."""
    finite = {e: t for e, t in times.items() if math.isfinite(t)}
    if not finite:
        return None
    best = min(finite, key=finite.__getitem__)
    if default in finite and finite[best] > finite[default] * (1 - MARGIN):
        return default
    return best


def forced_plan(replan: Callable[[], Plan], micro: tiles.Shape) -> Plan:
    """``replan()`` with the kernel shape ``micro`` forced (a tiled edge where shared memory takes it)."""
    with tiles.forcing(micro):
        return replan()


def _takes(replan: Callable[[], Plan], micro: tiles.Shape) -> bool:
    """Whether forcing ``micro`` gives a plan with that edge (the device's shared memory takes its tiles)."""
    return edge_of(forced_plan(replan, micro)) == micro


def edge_of(plan: Plan) -> tiles.Shape | None:
    """The kernel shape of the plan's product or convolution launches: ``tiles.REGISTER`` for the register-blocked
    kernels, else the micro-tile edge of its tiled launches (their ``TM`` define), or (rows, columns) where their
    micro-tile is rectangular; None where it has neither."""
    for step in plan.steps:
        spec = getattr(step, "spec", None)
        defines = dict(getattr(spec, "defines", ()) or ())
        if tiles.REGISTER_DEFINE[0] in defines:
            return tiles.REGISTER
        if "TM" in defines and spec.shared:
            tm, tn = int(defines["TM"]), int(defines.get("TN", defines["TM"]))
            return tm if tm == tn else (tm, tn)
    return None


def _scratch(device: Device, t: TensorType, rng: np.random.Generator | None = None) -> Any:
    """A buffer of type ``t``; with ``rng``, holding random values (small integers for integer types)."""
    buf = device.pool.allocate(max(t.size * t.dtype.itemsize, t.dtype.itemsize), t.dtype)
    if rng is None or not t.size:
        return buf
    if t.dtype.kind == "f":
        data = rng.standard_normal(t.shape).astype(t.dtype)
    elif t.dtype.kind in "iu":
        info = np.iinfo(t.dtype)
        data = rng.integers(max(info.min, -3), min(info.max, 4), t.shape).astype(t.dtype)
    else:
        data = (rng.random(t.shape) < 0.5).astype(t.dtype)
    device.pool.upload(buf, data).wait()
    return buf


def time_plan(op: Op, device: Device, ins: Sequence[TensorType], outs: Sequence[TensorType], attrs: dict[str, Any],
              plan: Plan) -> float:
    """Seconds of the fastest of ``TIMED_RUNS`` runs of ``plan`` on scratch tensors (inf where it fails)."""
    rng = np.random.default_rng(0)
    bufs: list[Any] = []
    try:
        compiled = programs(op, device, plan, ins, outs, attrs)
        for t in ins:  # (one at a time into ``bufs``: a failed allocation leaves none behind)
            bufs.append(_scratch(device, t, rng))
        for t in (*outs, *plan.temps):
            bufs.append(_scratch(device, t))
        in_bufs, out_bufs, temps = bufs[:len(ins)], bufs[len(ins):len(ins) + len(outs)], bufs[len(ins) + len(outs):]
        execute(op, device, plan, ins, outs, attrs, in_bufs, out_bufs, temps, [], compiled).wait()
        best = math.inf
        for _ in range(TIMED_RUNS):
            t0 = time.perf_counter()
            execute(op, device, plan, ins, outs, attrs, in_bufs, out_bufs, temps, [], compiled).wait()
            best = min(best, time.perf_counter() - t0)
        return best
    except DeviceLayerError:
        return math.inf
    finally:
        for b in bufs:
            device.pool.free(b)

"""Soak: allocate/free cycles of mixed sizes and many runs of one prepared plan, per device, with the
pool's free bytes and live buffers, the process's RSS, open file descriptors and threads back at their
baseline afterwards.

    python -m benchmarks.soak [--cycles 100000] [--runs 10000] [--device ID ...] [--seed 0] [--out DIR]

Per device: a warm-up (largest-size buffers written end to end, then a slice of both workloads, so
compile caches, the pool's cached memory and the C allocator's arenas reach their steady state), a
baseline snapshot, the allocate/free cycles, a snapshot, the plan runs, a last snapshot.  Deltas are
against the baseline.  Each snapshot is taken with the device idle, after a garbage collection and with
the C heap's free pages handed back (``malloc_trim``), so RSS counts memory in use.  On the host backend
``free_bytes`` is the machine's available memory, which every other process moves too: there the pool's
``allocated_bytes`` is the figure to read.

The cycles draw sizes log-uniformly from 1 B to 16 MiB (seeded) and keep a small window of live buffers
freed in random order; some cycles write through a view, some free a buffer while an upload into it is
still queued, some copy between live buffers.  The plan is a small multi-op graph compiled once on the
device and run with fresh inputs each time; every ``check_every``-th result is compared with NumPy.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import math
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

import devicelayer as dl
from devicelayer.memory import settle

RESULTS = Path(__file__).resolve().parent / "results"
MAX_SIZE = 16 << 20  # largest allocation of the cycles
WINDOW = 8           # live buffers kept at once by the cycles
SETTLE_EVERY = 32    # cycles between waits for the frees still pending (bounds the memory they hold)
SHAPE = (32, 48)     # the plan's input
Tick = Callable[[int], None]


@dataclass(frozen=True)
class Snapshot:
    """The resources a leak would grow: the pool's view and the process's."""

    free_bytes: int
    allocated_bytes: int
    live_buffers: int
    rss_bytes: int
    open_fds: int
    threads: int
    waiter_threads: int  # of ``threads``: devicelayer's waiter pool, which grows on demand to a fixed size
    callback_threads: int  # of ``threads``: devicelayer's callback threads (more while callbacks wait; idle ones end)
    python_objects: int  # objects the garbage collector tracks (containers: buffers, events, lists, dicts)

    def minus(self, other: "Snapshot") -> dict[str, int]:
        """Field-by-field difference ``self - other``."""
        mine, theirs = asdict(self), asdict(other)
        return {k: mine[k] - theirs[k] for k in mine}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _threads() -> int:
    """Native threads of the process (driver threads included), from /proc."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return threading.active_count()


def _trim_c_heap() -> None:
    """Hand the C allocator's free pages back to the system (glibc), so RSS counts memory in use."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def snapshot(device: dl.Device) -> Snapshot:
    """The device's pool figures and the process's resources once its work and garbage are gone."""
    device.synchronize()
    settle(60)  # memory of buffers and tensors the cycles dropped goes back (devicelayer/reclaim.py)
    gc.collect()
    _trim_c_heap()
    pool = device.pool
    waiters = sum(1 for t in threading.enumerate() if t.name.startswith("devicelayer-waiter"))
    callbacks = sum(1 for t in threading.enumerate() if t.name.startswith("devicelayer-callback"))
    return Snapshot(pool.free_bytes, pool.allocated_bytes, pool.live_buffers, _rss_bytes(),
                    len(os.listdir("/proc/self/fd")), _threads(), waiters, callbacks, len(gc.get_objects()))


def _aligned(value: int, align: int) -> int:
    return value // align * align


def fill(device: dl.Device, count: int = 2 * WINDOW) -> int:
    """Write every byte of ``count`` largest-size buffers live at once, then of 1/16-size ones in the gaps
    left (while they fit in memory the pool already holds: its ``free_bytes`` does not fall), then free them.

    The warm-up's first step: a pool that caches device memory (Vulkan's blocks; host memory on a
    unified device) then holds it already written, so the pages the cycles touch later are not new to the
    process's RSS.  Returns the number of buffers written.
    """
    pool = device.pool
    big = min(MAX_SIZE, device.info.max_allocation)
    small = max(1, big // 16)
    bufs = [pool.allocate(big) for _ in range(count)]
    try:
        ones = np.ones(big, np.uint8)
        for b in bufs:
            pool.upload(b, ones)
        while len(bufs) < count * 17:  # at most as many bytes again in small buffers
            before = pool.free_bytes
            b = pool.allocate(small)
            bufs.append(b)
            if pool.free_bytes < before:  # the pool took new memory: the gaps are written
                break
            pool.upload(b, ones[:small])
    finally:
        for ev in [pool.free(b) for b in bufs]:
            ev.wait()
    return len(bufs)


def alloc_cycles(device: dl.Device, cycles: int, rng: np.random.Generator, tick: Tick | None = None) -> dict:
    """``cycles`` allocations of mixed sizes, each freed within ``WINDOW`` cycles; returns what was exercised.

    Sizes and actions are drawn a chunk at a time, so the loop itself holds no per-cycle arrays.
    """
    pool = device.pool
    align = max(1, device.info.view_alignment)
    top = min(MAX_SIZE, device.info.max_allocation)
    scratch = np.arange(4096, dtype=np.uint8)
    back = np.empty(4096, np.uint8)
    live: list[dl.Buffer] = []
    frees: list[dl.Event] = []
    counts = {"allocated": 0, "bytes": 0, "views": 0, "pending_frees": 0, "copies": 0}
    done = 0
    while done < cycles:
        chunk = min(SETTLE_EVERY, cycles - done)
        sizes = np.exp(rng.uniform(0.0, math.log(top), chunk)).astype(np.int64).clip(1, top).tolist()
        for size, action in zip(sizes, rng.random(chunk).tolist()):
            buf = pool.allocate(size)
            counts["allocated"] += 1
            counts["bytes"] += size
            if action < 0.25 and size >= 2 * align:  # write and read back through a view at an aligned offset
                offset = _aligned(int(rng.integers(0, size // 2)), align)
                n = min(size - offset, scratch.nbytes)
                view = buf.view(offset, n)
                pool.upload(view, scratch[:n])
                pool.download(view, back[:n]).wait()
                if not np.array_equal(back[:n], scratch[:n]):
                    raise AssertionError(f"{device.id}: a view of a {size} B buffer read back wrong bytes")
                counts["views"] += 1
            elif action < 0.45:  # free while an upload into it is still queued
                n = min(size, scratch.nbytes)
                pool.upload(buf.view(0, n), scratch[:n])
                frees.append(pool.free(buf))
                counts["pending_frees"] += 1
                buf = None
            elif action < 0.55 and live:  # a device copy from a live buffer
                src = live[int(rng.integers(len(live)))]
                n = min(size, src.nbytes, scratch.nbytes)
                pool.copy(buf.view(0, n), src.view(0, n))
                counts["copies"] += 1
            if buf is not None:
                live.append(buf)
            if len(live) > WINDOW:
                frees.append(pool.free(live.pop(int(rng.integers(len(live))))))
        for ev in frees:
            ev.wait()
        frees.clear()
        done += chunk
        if tick is not None:
            tick(chunk)
    for ev in [pool.free(b) for b in live]:
        ev.wait()
    # End on a small checked round trip: a backend worker that keeps its last task alive until the next one
    # (tests/test_soak.py: test_completed_work_holds_no_host_array) then keeps 4 KiB, not a 16 MiB buffer,
    # so that bounded hold does not read as growth here; it is tested on its own.
    probe = pool.allocate(scratch.nbytes)
    pool.upload(probe, scratch)
    pool.download(probe, back).wait()
    pool.free(probe).wait()
    if not np.array_equal(back, scratch):
        raise AssertionError(f"{device.id}: the last round trip read back wrong bytes")
    return counts


def soak_graph() -> dl.Graph:
    """A small multi-op graph: ``y = softmax(tanh(relu(x @ w + b) * x))`` and ``s = sigmoid(x @ w)``."""
    rng = np.random.default_rng(7)
    g = dl.Graph("soak")
    x = g.input("x", SHAPE)
    w = g.constant(rng.standard_normal((SHAPE[1], SHAPE[1])).astype(np.float32) / 8, "w")
    b = g.constant(rng.standard_normal(SHAPE[1]).astype(np.float32), "b")
    xw = g.matmul(x, w)
    h = g.relu(g.add(xw, b))
    g.output("y", g.softmax(g.tanh(g.mul(h, x)), axis=-1))
    g.output("s", g.sigmoid(xw))
    return g


def soak_reference(x: np.ndarray) -> dict[str, np.ndarray]:
    """The graph of ``soak_graph`` in float64 NumPy."""
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((SHAPE[1], SHAPE[1])).astype(np.float32) / 8).astype(np.float64)
    b = rng.standard_normal(SHAPE[1]).astype(np.float32).astype(np.float64)
    xw = x.astype(np.float64) @ w
    t = np.tanh(np.maximum(xw + b, 0) * x)
    e = np.exp(t - t.max(axis=-1, keepdims=True))
    return {"y": e / e.sum(axis=-1, keepdims=True), "s": 1 / (1 + np.exp(-xw))}


def plan_runs(plan, runs: int, rng: np.random.Generator, check_every: int = 100, tick: Tick | None = None) -> dict:
    """Run ``plan`` ``runs`` times with fresh inputs; every ``check_every``-th result is checked against NumPy."""
    worst = 0.0
    checked = 0
    for i in range(runs):
        x = rng.standard_normal(SHAPE).astype(np.float32)
        out = plan(x=x)
        if i % check_every == 0 or i == runs - 1:
            want = soak_reference(x)
            for name, ref in want.items():
                err = float(np.max(np.abs(out[name] - ref)))
                worst = max(worst, err)
                if not err <= 1e-4:
                    raise AssertionError(f"run {i}: output {name!r} differs from NumPy by {err:.3g}")
            checked += 1
        if tick is not None and (i + 1) % 50 == 0:
            tick(50)
    if tick is not None:
        tick(runs % 50)
    return {"runs": runs, "checked": checked, "max_abs_error": worst}


def soak_device(device: dl.Device, cycles: int, runs: int, seed: int = 0, check_every: int = 100,
                warmup_cycles: int | None = None, warmup_runs: int | None = None,
                tick: Tick | None = None) -> dict:
    """Warm up, take the baseline, run the cycles and the plan; the snapshots and their deltas."""
    rng = np.random.default_rng([seed, sum(device.id.encode())])
    warmup_cycles = min(2000, max(cycles // 10, 200)) if warmup_cycles is None else warmup_cycles
    warmup_runs = min(200, max(runs // 10, 20)) if warmup_runs is None else warmup_runs
    plan = soak_graph().compile([device], strict=True)
    try:
        fill(device)
        alloc_cycles(device, warmup_cycles, rng)
        plan_runs(plan, warmup_runs, rng, check_every)
        base = snapshot(device)
        t0 = time.perf_counter()
        cyc = alloc_cycles(device, cycles, rng, tick)
        t1 = time.perf_counter()
        after_cycles = snapshot(device)
        t2 = time.perf_counter()
        run = plan_runs(plan, runs, rng, check_every, tick)
        t3 = time.perf_counter()
        after_runs = snapshot(device)
    finally:
        plan.release()
    return {"device": device.id, "name": device.info.name, "cycles": cycles, "runs": runs,
            "warmup_cycles": warmup_cycles, "warmup_runs": warmup_runs,
            "cycle_us": (t1 - t0) / max(cycles, 1) * 1e6, "run_us": (t3 - t2) / max(runs, 1) * 1e6,
            "exercised": cyc, "plan": run,
            "baseline": asdict(base), "after_cycles": asdict(after_cycles), "after_runs": asdict(after_runs),
            "delta_cycles": after_cycles.minus(base), "delta_runs": after_runs.minus(base)}


def _table(rows: list[dict]):
    from rich.table import Table

    table = Table(title="soak: change against the baseline taken after warm-up")
    for col in ("device", "phase", "count", "us each", "free_bytes", "live buffers", "RSS KiB", "fds",
                "threads (waiters)", "objects", "max error (checks)"):
        table.add_column(col, justify="left" if col in ("device", "phase") else "right")
    for r in rows:
        err = f"{r['plan']['max_abs_error']:.2g} ({r['plan']['checked']})"
        for phase, count, each, d, e in (("cycles", r["cycles"], r["cycle_us"], r["delta_cycles"], "exact"),
                                         ("plan runs", r["runs"], r["run_us"], r["delta_runs"], err)):
            table.add_row(r["device"], phase, str(count), f"{each:.1f}", f"{d['free_bytes']:+d}",
                          f"{d['live_buffers']:+d}", f"{d['rss_bytes'] / 1024:+.0f}", f"{d['open_fds']:+d}",
                          f"{d['threads']:+d} ({d['waiter_threads']:+d})", f"{d['python_objects']:+d}", e)
    return table


def main(argv=None) -> int:
    """Command line: run the soak on the chosen devices, print the table and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=100_000, help="allocate/free cycles per device")
    parser.add_argument("--runs", type=int, default=10_000, help="runs of the prepared plan per device")
    parser.add_argument("--device", action="append", help="device id (repeatable; default: every device)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check-every", type=int, default=100, help="compare every N-th plan result with NumPy")
    parser.add_argument("--out", default=str(RESULTS), help="folder for the JSON result")
    parser.add_argument("--tag", default="", help="first part of the JSON file's name (default soak)")
    args = parser.parse_args(argv)

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from benchmarks.run import context, write

    devices = [dl.device(i) for i in args.device] if args.device else dl.devices()
    console = Console(width=None if sys.stdout.isatty() else 130)
    rows = []
    # the bar keeps no speed samples: they would count among the objects the soak watches
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, speed_estimate_period=1e-6) as progress:
        for dev in devices:
            task = progress.add_task(f"{dev.id}", total=args.cycles + args.runs)
            rows.append(soak_device(dev, args.cycles, args.runs, args.seed, args.check_every,
                                    tick=lambda n, t=task: progress.advance(t, n)))
    console.print(_table(rows))
    doc = {**context(devices), "cpus": os.cpu_count(), "seed": args.seed, "max_size": MAX_SIZE, "window": WINDOW,
           "results": rows}
    console.print(f"results written to {write(doc, args.out, args.tag or 'soak')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Concurrent soak: 8 threads at once launching kernels, transferring between devices, running plans (recorded
and not) on every device and adding done callbacks that do host work and wait, every result checked; then
the devices' memory, the threads and the open file descriptors back where they were.

    python -m benchmarks.soak_concurrent [--seconds 20] [--threads 8] [--device ID ...] [--out DIR]

``DEVICELAYER_SOAK_SECONDS`` sets the default duration.  First one full cycle of every thread's work runs
(the warm-up), then all threads run for a tenth of the soak (``--warmup-seconds``, at most 60 s): kernels
compile, plans prepare and record, pools, drivers and vendor libraries (cuBLAS's workspace, CuPy's pool,
Vulkan's blocks, a driver's own descriptor and command pools) take the memory they keep for good.  The
baseline is taken after it, so one-time growth is in it; the check after the soak stays exact, so a leak of
any size per cycle shows.  A device's free memory is checked for a fall only: more free memory than at the
baseline is memory a driver or library gave back, not a leak.  What the timed warm-up itself took beyond one
cycle is reported (``warmup_growth``), so one-time growth stays visible.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass, field

import numpy as np

import devicelayer as dl
from devicelayer.memory import settle
from benchmarks.soak import SHAPE, soak_graph, soak_reference
from devicelayer.events import callback_threads

THREADS = 8
TOLERANCE = 1e-4


@dataclass
class State:
    """What a leak would grow: per device (free bytes, allocated bytes, live buffers), and the process's."""

    devices: dict[str, tuple[int, int, int]]
    open_fds: int
    threads: int            # Python threads, devicelayer's helper pools below apart
    waiter_threads: int     # devicelayer's waiter pool: grows on demand up to a fixed size
    callback_threads: int   # devicelayer's callback threads: more start while callbacks wait, idle ones end

    def differences(self, base: "State", waiter_limit: int) -> list[str]:
        """Every way this state is past ``base``: memory and descriptors exactly; threads as their pools allow."""
        found = []
        for dev, (free, allocated, live) in self.devices.items():
            bfree, ballocated, blive = base.devices[dev]
            if allocated != ballocated or live != blive:
                found.append(f"{dev}: {allocated - ballocated:+d} bytes in {live - blive:+d} buffers held")
            if dev != "host" and free < bfree:  # (the host's figure is the machine's, moved by every process)
                found.append(f"{dev}: free memory {free - bfree:+d} bytes")
        if self.open_fds != base.open_fds:
            found.append(f"open file descriptors {self.open_fds - base.open_fds:+d}")
        if self.threads != base.threads:
            found.append(f"threads {self.threads - base.threads:+d}")
        if self.waiter_threads > waiter_limit:
            found.append(f"waiter threads {self.waiter_threads} (limit {waiter_limit})")
        if self.callback_threads > max(1, base.callback_threads):
            found.append(f"callback threads {self.callback_threads} (baseline {base.callback_threads})")
        return found


def state(devices: list[dl.Device]) -> State:
    """The state once the devices are idle and garbage collected."""
    for d in devices:
        d.synchronize()
    settle(60)  # memory of buffers and tensors the threads dropped goes back (devicelayer/reclaim.py)
    gc.collect()
    names = [t.name for t in threading.enumerate()]
    waiters = sum(n.startswith("devicelayer-waiter") for n in names)
    callbacks = sum(n.startswith("devicelayer-callback") for n in names)
    return State({d.id: (d.pool.free_bytes, d.pool.allocated_bytes, d.pool.live_buffers) for d in devices},
                 len(os.listdir("/proc/self/fd")), len(names) - waiters - callbacks, waiters, callbacks)


@dataclass
class Worker:
    """One soak thread: its own plans on every device (a plan runs in one thread at a time)."""

    index: int
    devices: list[dl.Device]
    plans: dict[str, list] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=lambda: {"cycles": 0, "launches": 0, "transfers": 0,
                                                            "plan_runs": 0})
    errors: list[str] = field(default_factory=list)
    called: list[bool] = field(default_factory=list)  # per callback run: whether its host work was right
    worst: float = 0.0

    def prepare(self) -> None:
        for d in self.devices:
            self.plans[d.id] = [soak_graph().compile([d], strict=True, record=r) for r in (False, True)]

    def release(self) -> None:
        for plans in self.plans.values():
            for p in plans:
                p.release()

    def check(self, what: str, got: np.ndarray, want: np.ndarray) -> None:
        err = float(np.max(np.abs(got - want))) if got.shape == want.shape else float("inf")
        self.worst = max(self.worst, err)
        if not err <= TOLERANCE:
            raise AssertionError(f"thread {self.index}: {what} differs from NumPy by {err:.3g}")

    def callback(self, _: dl.Event) -> None:
        """A done callback: host work, submitted and waited for (on a callback thread)."""
        t = dl.tensor(np.full(16, 2.0, np.float32), "host")
        y = dl.ops.relu(t)
        self.called.append(bool(np.array_equal(y.numpy(), t.numpy())))
        y.free()
        t.free()

    def cycle(self, rng: np.random.Generator) -> None:
        """One pass over every device: launch, transfer, both plans, a callback."""
        n = len(self.devices)
        for j in range(n):
            dev, other = self.devices[(self.index + j) % n], self.devices[(self.index + j + 1) % n]
            x = rng.standard_normal(SHAPE).astype(np.float32)
            t = dl.tensor(x, dev)
            y = dl.ops.relu(t)
            y.ready.add_done_callback(self.callback)
            moved = y.to(other)
            self.check(f"relu on {dev.id}, moved to {other.id}", moved.numpy(), np.maximum(x, 0))
            for tensor in {id(v): v for v in (t, y, moved)}.values():
                tensor.free()
            want = soak_reference(x)
            for plan in self.plans[dev.id]:
                out = plan(x=x)
                for name, ref in want.items():
                    self.check(f"plan on {dev.id} ({name})", out[name], ref)
            self.counts["launches"] += 1
            self.counts["transfers"] += 1
            self.counts["plan_runs"] += 2
        self.counts["cycles"] += 1

    def run(self, until: float, seed: int) -> None:
        rng = np.random.default_rng([seed, self.index])
        try:
            while time.monotonic() < until:
                self.cycle(rng)
        except Exception as exc:  # noqa: BLE001 - reported with the result
            self.errors.append(f"{type(exc).__name__}: {exc}")


def concurrent_soak(devices: list[dl.Device], seconds: float, threads: int = THREADS, seed: int = 0,
                    settle_seconds: float = 30.0, warmup_seconds: float | None = None) -> dict:
    """Warm up (one cycle per thread, all at once, then ``warmup_seconds`` of the soak: default a tenth of
    ``seconds``, at most 60), take the baseline, soak for ``seconds``, compare."""
    if warmup_seconds is None:
        warmup_seconds = min(60.0, seconds / 10)
    from devicelayer import events

    workers = [Worker(i, devices) for i in range(threads)]
    try:
        for w in workers:
            w.prepare()

        def phase(until: float) -> None:
            ts = [threading.Thread(target=w.run, args=(until, seed), name=f"soak-{w.index}") for w in workers]
            for t in ts:
                t.start()
            for t in ts:
                t.join()

        warm = [threading.Thread(target=w.cycle, args=(np.random.default_rng([seed, 99, w.index]),)) for w in workers]
        for t in warm:
            t.start()
        for t in warm:
            t.join()
        callback_threads.join(60)
        first = settled(devices, None, 0.0)
        phase(time.monotonic() + warmup_seconds)
        callback_threads.join(60)
        base = settled(devices, None, 0.0)
        t0 = time.monotonic()
        phase(t0 + seconds)
        elapsed = time.monotonic() - t0
        callback_threads.join(60)
        limit = events._waiters.max_workers
        after = settled(devices, lambda s: not s.differences(base, limit), settle_seconds)
    finally:
        for w in workers:
            w.release()
    totals = {k: sum(w.counts[k] for w in workers) for k in workers[0].counts}
    called = [c for w in workers for c in w.called]
    totals["callbacks"] = len(called)
    errors = [e for w in workers for e in w.errors] + [f"{called.count(False)} callbacks' host work was wrong"
                                                      for _ in [0] if False in called]
    return {"devices": [d.id for d in devices], "threads": threads, "seconds": elapsed, "counts": totals,
            "max_abs_error": max(w.worst for w in workers), "errors": errors,
            "warmup_seconds": warmup_seconds, "warmup_growth": base.differences(first, limit),
            "baseline": asdict(base), "after": asdict(after), "differences": after.differences(base, limit)}


def settled(devices: list[dl.Device], ok, seconds: float) -> State:
    """The state once ``ok(state)`` holds or ``seconds`` have passed (frees finish on the dispatcher after
    their work, idle callback threads end after a while)."""
    deadline = time.monotonic() + seconds
    while True:
        s = state(devices)
        if ok is None or ok(s) or time.monotonic() >= deadline:
            return s
        time.sleep(0.1)


def main(argv=None) -> int:
    """Command line: run the concurrent soak, print the outcome, write the JSON; exit 1 when it failed."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("DEVICELAYER_SOAK_SECONDS", 20)))
    parser.add_argument("--threads", type=int, default=THREADS)
    parser.add_argument("--warmup-seconds", type=float, default=None,
                        help="all threads' work before the baseline (default: a tenth of --seconds, at most 60)")
    parser.add_argument("--device", action="append", help="device id (repeatable; default: every device)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="folder for the JSON result (default: benchmarks/results)")
    args = parser.parse_args(argv)
    from benchmarks.run import context, write
    from benchmarks.soak import RESULTS

    devices = [dl.device(i) for i in args.device] if args.device else dl.devices()
    result = concurrent_soak(devices, args.seconds, args.threads, args.seed, warmup_seconds=args.warmup_seconds)
    ok = not result["errors"] and not result["differences"]
    print(f"concurrent soak, {result['threads']} threads, {result['seconds']:.0f} s on "
          f"{', '.join(result['devices'])}: {result['counts']}, max error {result['max_abs_error']:.2g}")
    for line in result["errors"] + result["differences"]:
        print("  " + line)
    for line in result["warmup_growth"]:
        print(f"  (one-time, during the {result['warmup_seconds']:.0f} s warm-up: {line})")
    print("  passed" if ok else "  FAILED")
    path = write({**context(devices), "passed": ok, "result": result}, args.out or str(RESULTS), "soak-concurrent")
    print(f"results written to {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

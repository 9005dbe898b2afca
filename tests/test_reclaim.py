"""Objects the program drops are cleaned up on the reclaim thread, never inside the garbage collector's call."""

from __future__ import annotations

import gc
import logging
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import devicelayer as dl
from devicelayer import reclaim
from devicelayer.errors import OutOfMemory


class _Dropped:
    pass


def test_cleanup_runs_on_the_reclaim_thread_and_a_failing_one_does_not_stop_the_next(caplog):
    ran: list[str] = []
    first, second = _Dropped(), _Dropped()

    def fails() -> None:
        raise RuntimeError("cleanup broke")

    reclaim.on_drop(first, fails)
    reclaim.on_drop(second, lambda: ran.append(threading.current_thread().name))
    with caplog.at_level(logging.ERROR, logger="devicelayer"):
        del first, second
        gc.collect()
        assert reclaim.drain(30)
    assert ran == ["devicelayer-reclaim"]
    assert "cleanup broke" in caplog.text


def test_drain_waits_for_queued_cleanup_and_times_out_while_it_cannot_run():
    gate, done = threading.Event(), []
    held = _Dropped()
    reclaim.on_drop(held, lambda: (gate.wait(30), done.append(1)))
    del held
    gc.collect()
    try:
        assert reclaim.drain(0.2) is False
        assert done == []
    finally:
        gate.set()
    assert reclaim.drain(30)
    assert done == [1]


def test_a_finalizer_called_by_the_program_queues_its_cleanup_once():
    ran: list[int] = []
    obj = _Dropped()
    finalizer = reclaim.on_drop(obj, ran.append, 7)
    assert finalizer.atexit is False  # the process's memory goes with it at exit
    finalizer()
    finalizer()
    assert reclaim.drain(30)
    del obj
    gc.collect()
    assert reclaim.drain(30)
    assert ran == [7]


# The collector runs a finalizer on whichever thread it interrupts: here, one that holds a device's memory-pool
# lock and the lock of every event's state when the last reference to a run plan goes.  Run in a fresh process:
# a finalizer that took either lock on that thread would hang it for good.
_DROP_UNDER_LOCKS = textwrap.dedent("""
    import gc
    import threading
    import time

    import numpy as np
    import devicelayer as dl
    from devicelayer import events, reclaim

    for dev in dl.devices():
        pool = dev.pool
        before = pool.live_buffers
        g = dl.Graph()
        x = g.input("x", (64,))
        g.output("y", g.tanh(g.mul(g.relu(x), g.constant(np.full(64, 3, np.float32)))))
        plan = g.compile([dev.id])
        xv = np.random.default_rng(5).standard_normal(64).astype(np.float32)
        np.testing.assert_allclose(plan(x=xv)["y"], np.tanh(3 * np.maximum(xv, 0)), rtol=1e-5, atol=1e-6)
        assert pool.live_buffers > before
        dropped = threading.Event()

        def drop():
            global plan
            with pool._lock, events._state_lock:
                del plan
                gc.collect()
            dropped.set()

        threading.Thread(target=drop, daemon=True).start()
        assert dropped.wait(30), f"{dev.id}: dropping a plan under devicelayer's locks hung"
        assert reclaim.drain(30)
        dev.synchronize()
        deadline = time.monotonic() + 30  # a buffer still in use is released once its work completes
        while pool.live_buffers != before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pool.live_buffers == before, (dev.id, pool.live_buffers, before)
        print("released", dev.id)
""")


def test_a_plan_dropped_while_its_thread_holds_devicelayer_locks_is_released_later():
    done = subprocess.run([sys.executable, "-c", _DROP_UNDER_LOCKS], capture_output=True, text=True,
                          timeout=240, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    released = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("released ")]
    assert released == [d.id for d in dl.devices()]


def test_an_allocation_that_fails_waits_for_dropped_memory_then_tries_again():
    pool = dl.device("host").pool
    gate = threading.Event()
    blocker = _Dropped()
    reclaim.on_drop(blocker, gate.wait, 30)  # keeps the reclaim thread busy until the gate opens
    freed: list[int] = []
    holder = _Dropped()
    reclaim.on_drop(holder, freed.append, 1)
    del blocker, holder
    gc.collect()
    allocate = pool._allocate
    calls: list[int] = []

    def full_until_freed(nbytes: int):
        calls.append(nbytes)
        if not freed:
            raise OutOfMemory("host: full")  # the device is full until the dropped object's memory is released
        return allocate(nbytes)

    pool._allocate = full_until_freed
    try:
        threading.Timer(0.3, gate.set).start()
        buf = pool.allocate(256, np.float32)
        assert calls == [256, 256] and freed == [1]
        pool.free(buf)
        freed.clear()
        calls.clear()
        live = pool.live_buffers
        with pytest.raises(OutOfMemory, match="full"):
            pool.allocate(256, np.float32)  # nothing reclaimed helps: the pool's own error, after one retry
        assert calls == [256, 256] and pool.live_buffers == live
    finally:
        gate.set()
        pool._allocate = allocate
    assert reclaim.drain(30)

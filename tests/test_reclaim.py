"""Objects the program drops are cleaned up on the reclaim thread, never inside the garbage collector's call."""

from __future__ import annotations

import gc
import logging
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import devicelayer as dl
from devicelayer import reclaim
from devicelayer.errors import OutOfMemory
from devicelayer.memory import settle


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


# -- memory the program drops without free() ------------------------------------------------------------------------
def _settle(pool, live: int | None = None, nbytes: int | None = None) -> tuple[int, int]:
    """The pool's (live buffers, bytes) once dropped memory whose work is done has been released; with a target,
    waiting up to 30 s for the pool to reach it."""
    assert settle()
    deadline = time.monotonic() + 30
    while live is not None and (pool.live_buffers, pool.allocated_bytes) != (live, nbytes) \
            and time.monotonic() < deadline:
        assert settle()
        time.sleep(0.01)
    return pool.live_buffers, pool.allocated_bytes


def test_tensors_dropped_by_the_program_free_their_memory(device, rng):
    pool = device.pool
    x = dl.tensor(rng.standard_normal((32, 48)).astype(np.float32), device)
    w = dl.tensor(rng.standard_normal((48, 16)).astype(np.float32), device)
    want = dl.ops.gelu(dl.ops.matmul(x, w)).numpy()  # first: a vendor library's workspace, kept, is not a leak
    base = _settle(pool)
    for _ in range(40):  # README's example: two intermediate buffers per call, none kept
        np.testing.assert_array_equal(dl.ops.gelu(dl.ops.matmul(x, w)).numpy(), want)
    assert _settle(pool, *base) == base


def test_a_loop_over_a_large_tensor_does_not_run_out_of_memory(device, rng):
    big = dl.tensor(rng.standard_normal(1 << 20).astype(np.float32), device)  # 4 MiB
    pool = device.pool
    base = _settle(pool)
    # more iterations than the memory of the smallest device here would hold if each kept its output
    rounds = min(600, int(pool.total_bytes // big.nbytes) + 8)
    for _ in range(rounds):
        y = dl.ops.relu(big)
    np.testing.assert_array_equal(y.numpy(), np.maximum(big.numpy(), 0))
    del y
    assert _settle(pool, *base) == base


def test_a_dropped_buffer_is_released_only_after_the_work_using_it(device, rng):
    pool = device.pool
    base = _settle(pool)
    data = rng.standard_normal(4096).astype(np.float32)
    gate = dl.UserEvent("gate")
    src = pool.allocate(data.nbytes, np.float32)
    pool.upload(src, data).wait()
    out = np.full_like(data, np.nan)
    dst = pool.allocate(data.nbytes, np.float32)
    copied = pool.copy(dst, src, wait=[gate])
    read = pool.download(dst, out, wait=[copied])
    del src, dst  # both dropped while the copy still waits for the gate
    gc.collect()
    assert reclaim.drain(30)
    assert pool.live_buffers == base[0] + 2  # held for the pending work
    gate.set()
    read.wait(60)
    np.testing.assert_array_equal(out, data)
    assert _settle(pool, *base) == base


def test_a_view_or_reshape_keeps_the_allocation_and_free_then_drop_releases_once(device, rng):
    pool = device.pool
    base = _settle(pool)
    data = rng.standard_normal((8, 64)).astype(np.float32)
    t = dl.tensor(data, device)
    flat = t.reshape((512,))
    view = t.buffer.view(256, 256, np.float32)
    del t
    gc.collect()
    assert reclaim.drain(30)
    np.testing.assert_array_equal(flat.numpy(), data.reshape(-1))
    out = np.empty(64, np.float32)
    pool.download(view, out).wait()
    np.testing.assert_array_equal(out, data.reshape(-1)[64:128])
    del flat
    gc.collect()
    assert reclaim.drain(30)
    assert pool.live_buffers == base[0] + 1  # the view still holds its allocation
    del view
    assert _settle(pool, *base) == base
    kept = dl.tensor(data, device)
    kept.free()
    del kept  # freed explicitly, then dropped: released once
    assert _settle(pool, *base) == base
    assert pool.live_buffers == base[0]


def test_plan_outputs_dropped_by_the_program_free_their_memory(device, rng):
    g = dl.Graph()
    x = g.input("x", (256,))
    g.output("y", g.tanh(g.relu(x)))
    plan = g.compile([device.id])
    xv = dl.tensor(rng.standard_normal(256).astype(np.float32), device)
    first = plan.run({"x": xv})["y"].numpy()
    pool = device.pool
    base = _settle(pool)
    for _ in range(30):
        np.testing.assert_array_equal(plan.run({"x": xv})["y"].numpy(), first)
    assert _settle(pool, *base) == base


_DROP_AFTER_CLOSE = textwrap.dedent("""
    import gc
    import numpy as np
    import devicelayer as dl
    from devicelayer import reclaim

    for dev in dl.devices():
        t = dl.tensor(np.arange(1024, dtype=np.float32), dev)
        y = dl.ops.relu(t)
        dev.close()
        del t, y  # the device released its memory when it closed: nothing is left to free
        gc.collect()
        assert reclaim.drain(30)
        print("dropped", dev.id)
""")


def test_tensors_dropped_after_their_device_closed_release_nothing_twice():
    done = subprocess.run([sys.executable, "-c", _DROP_AFTER_CLOSE], capture_output=True, text=True,
                          timeout=240, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [line.split()[1] for line in done.stdout.splitlines() if line.startswith("dropped ")] == \
        [d.id for d in dl.devices()]

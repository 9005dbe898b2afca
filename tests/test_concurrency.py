"""Concurrency on every device: many threads launching and copying at once, a buffer handed between threads
through events, prepared plans run from several threads, and one plan refused to a second thread.

Every result is checked exactly (integers, or floats holding small integers).  A deadlock fails the test
through its timeout instead of hanging the run.
"""

from __future__ import annotations

import gc
import queue
import threading
import time

import numpy as np
import pytest

import devicelayer as dl
from devicelayer import reclaim
from kernels import INCREMENT, SCALE_ADD, source

THREADS = 8


def _in_threads(count: int, work) -> list:
    """Run ``work(i)`` in ``count`` threads started together; their results in order, or the first exception."""
    start = threading.Barrier(count)
    results: list = [None] * count
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            start.wait(30)
            results[i] = work(i)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,), name=f"test-worker-{i}") for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(50)
    assert not [t.name for t in threads if t.is_alive()], "worker threads still running (deadlock?)"
    if errors:
        raise errors[0]
    return results


@pytest.mark.timeout(60)
def test_threads_launching_and_copying_on_one_device(device):
    """Each thread has buffers of its own, and a window (view) of one allocation all of them share."""
    pool = device.pool
    n, rounds = 1000, 6
    align = max(device.info.view_alignment, 4)
    stride = -(-4 * n // align) * align
    windows = pool.allocate(stride * THREADS)

    def work(i: int) -> int:
        rng = np.random.default_rng(i)
        inc = device.compile(source(INCREMENT, device), "increment")  # compiled by every thread at once
        axpy = device.compile(source(SCALE_ADD, device), "scale_add")
        a, b = windows.view(i * stride, 4 * n, np.int32), pool.allocate(4 * n, np.int32)
        x, y = pool.allocate(4 * n, np.float32), pool.allocate(4 * n, np.float32)
        try:
            for r in range(rounds):
                data = rng.integers(-1000, 1000, n, dtype=np.int32)
                xs = rng.integers(-50, 50, n).astype(np.float32)
                ys = rng.integers(-50, 50, n).astype(np.float32)
                pool.upload(a, data)
                for _ in range(r + 1):
                    device.launch(inc, [a, n], n)
                pool.copy(b, a)
                device.launch(inc, [b, n - 1], n)  # the last element is left alone
                pool.upload(x, xs)
                pool.upload(y, ys)
                device.launch(axpy, [y, x, float(i + 1), n], n)
                got_a, got_b, got_y = np.empty(n, np.int32), np.empty(n, np.int32), np.empty(n, np.float32)
                pool.download(a, got_a)
                pool.download(b, got_b)
                pool.download(y, got_y).wait(30)
                want_b = data + r + 2
                want_b[-1] -= 1
                assert np.array_equal(got_a, data + r + 1), (i, r, "a")
                assert np.array_equal(got_b, want_b), (i, r, "b")
                assert np.array_equal(got_y, ys + np.float32(i + 1) * xs), (i, r, "y")
            return rounds
        finally:
            for buf in (b, x, y):
                pool.free(buf)

    gc.collect()  # buffers of earlier tests' garbage are freed now, not while this one counts
    reclaim.drain(30)
    device.synchronize()
    live = pool.live_buffers
    assert _in_threads(THREADS, work) == [rounds] * THREADS
    pool.free(windows).wait(30)
    assert pool.live_buffers == live - 1


@pytest.mark.timeout(60)
def test_threads_handing_one_buffer_along_through_events(device):
    """Thread i waits for thread i-1's event, increments the shared buffer after it and hands its event on."""
    pool = device.pool
    n, rounds = 512, 5
    prog = device.compile(source(INCREMENT, device), "increment")
    shared = pool.allocate(4 * n, np.int32)
    start = np.arange(n, dtype=np.int32)
    gate = dl.UserEvent("chain start")
    first = pool.upload(shared, start, wait=[gate])
    inboxes = [queue.Queue() for _ in range(THREADS)]
    inboxes[0].put(first)
    seen: list[dl.Event] = []

    def work(i: int) -> int:
        for r in range(rounds):
            prev = inboxes[i].get(timeout=30)
            ev = device.launch(prog, [shared, n], n, wait=[prev])
            if i == THREADS - 1 and r == rounds - 1:
                seen.append(ev)
            else:
                inboxes[(i + 1) % THREADS].put(ev)
        return rounds

    opener = threading.Timer(0.1, gate.set)  # the whole chain is submitted before any of it may run
    opener.start()
    try:
        assert _in_threads(THREADS, work) == [rounds] * THREADS
    finally:
        opener.join()
    out = np.empty(n, np.int32)
    pool.download(shared, out, wait=seen).wait(30)
    assert np.array_equal(out, start + THREADS * rounds)
    pool.free(shared)


def _plan_for(device, k: int):
    """Plan ``k``: ``y = relu(x * (k + 1) - k) + c_k`` on ``device``; also returns its NumPy version."""
    c = np.arange(16, dtype=np.float32) * (k + 1)
    g = dl.Graph(f"plan{k}")
    x = g.input("x", (4, 16))
    g.output("y", g.add(g.relu(g.sub(g.mul(x, g.constant(np.float32(k + 1))), g.constant(np.float32(k)))),
                        g.constant(c)))
    return g.compile([device]), (lambda xv: np.maximum(xv * (k + 1) - k, 0) + c)


@pytest.mark.timeout(60)
def test_independent_plans_run_from_several_threads(device):
    plans = [_plan_for(device, k) for k in range(4)]

    def work(k: int) -> int:
        plan, want = plans[k]
        rng = np.random.default_rng(k)
        for _ in range(25):
            xv = rng.integers(-8, 8, (4, 16)).astype(np.float32)
            assert np.array_equal(plan(x=xv)["y"], want(xv)), k
        return k

    assert _in_threads(len(plans), work) == list(range(len(plans)))
    for plan, _ in plans:
        plan.release()


@pytest.mark.timeout(60)
def test_one_plan_from_two_threads_is_refused_and_never_corrupted(device):
    plan, want = _plan_for(device, 2)
    xs = np.arange(64, dtype=np.float32).reshape(4, 16) - 30
    held = device.pool.allocate(xs.nbytes, np.float32)
    device.pool.upload(held, xs).wait(30)
    gate = dl.UserEvent("input not ready yet")
    first: list = []

    def gated_run() -> None:  # retried while this thread's own attempts find the plan busy
        while not first:
            try:
                first.append(plan(x=dl.Tensor(held, xs.shape, np.float32, gate)))
            except dl.GraphError as exc:
                assert "already running" in str(exc)

    runner = threading.Thread(target=gated_run)
    runner.start()
    try:
        for _ in range(200):  # until the first run is inside the plan, waiting on its input
            try:
                assert np.array_equal(plan(x=xs)["y"], want(xs))
            except dl.GraphError as exc:
                assert "already running" in str(exc)
                break
            time.sleep(0.005)
        else:
            pytest.fail("a second run of a busy plan was never refused")
    finally:
        gate.set()
        runner.join(30)
    assert np.array_equal(first[0]["y"], want(xs))

    # two threads share the plan, each retrying when refused: every run gives its own input's result
    def work(i: int) -> int:
        rng = np.random.default_rng(i)
        refused = 0
        for _ in range(30):
            xv = rng.integers(-8, 8, (4, 16)).astype(np.float32)
            while True:
                try:
                    out = plan(x=xv)["y"]
                    break
                except dl.GraphError as exc:
                    assert "already running" in str(exc) and refused < 100_000
                    refused += 1
                    time.sleep(0.0005)
            assert np.array_equal(out, want(xv)), i
        return refused

    _in_threads(2, work)
    assert np.array_equal(plan(x=xs)["y"], want(xs))
    plan.release()
    device.pool.free(held)

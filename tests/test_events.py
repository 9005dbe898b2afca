"""The event model itself: deferred chains never starve the waiter threads that native events need."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import devicelayer as dl
from devicelayer import events as ev_module
from devicelayer.events import DeferredEvent, Event


class SlowNative(Event):
    """A native-like event with no callback of its own: completion is learnt by blocking (a waiter thread)."""

    def __init__(self, label: str) -> None:
        super().__init__(label)
        self.gate = threading.Event()

    def _block(self, timeout):
        return self.gate.wait(timeout)


def _threads_but_callbacks() -> int:
    """Threads alive, not counting the callback threads (they run the program's callbacks, no device work)."""
    return sum(1 for t in threading.enumerate() if not t.name.startswith("devicelayer-callback"))


def test_deferred_events_do_not_occupy_waiter_threads(monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    private = ThreadPoolExecutor(max_workers=4, thread_name_prefix="test-waiter")
    monkeypatch.setattr(ev_module, "_waiters", private)  # a pool of our own: other tests' events stay out
    before = _threads_but_callbacks()
    deferred = [DeferredEvent(f"d{i}", None) for i in range(64)]
    seen = []
    for d in deferred:
        d.add_done_callback(seen.append)
    native = SlowNative("native")
    native.add_done_callback(seen.append)
    native.gate.set()
    native.wait(10)
    # at most the one waiter the native needed was started; none parked on the 64 deferred events
    assert private._work_queue.qsize() == 0
    assert _threads_but_callbacks() - before <= 2
    for d in deferred:
        d._finish()
    assert ev_module.callback_threads.join(10)
    assert len(seen) == 65
    private.shutdown()


def test_long_chain_through_many_watched_natives():
    """More watched natives than waiter threads, each gating a deferred step: everything completes."""
    natives = [SlowNative(f"n{i}") for i in range(40)]
    dev = dl.device("host")
    buf = dev.pool.allocate(8)
    events = [dev.pool.copy(buf.view(0, 4), buf.view(4, 4), wait=[n]) for n in natives]
    for n in natives:
        n.gate.set()
    for e in events:
        e.wait(30)
    dev.pool.free(buf)


def test_wait_without_end_is_as_long_as_it_takes(device):
    t = dl.tensor(np.ones(4, np.float32), device)
    for timeout in (float("inf"), 1e300):
        t.ready.wait(timeout)
        assert t.ready.error is None
    np.testing.assert_array_equal(t.numpy(), np.ones(4, np.float32))
    t.free()


def test_a_callback_that_raises_anything_is_logged_and_the_device_goes_on(device, caplog):
    gate = dl.UserEvent("gate")
    t = dl.tensor(np.zeros(4, np.float32), device)
    up = device.pool.upload(t.buffer, np.arange(4, dtype=np.float32), wait=[gate])

    def bail(_):
        raise SystemExit(3)

    up.add_done_callback(bail)
    gate.set()
    up.wait(60)
    assert ev_module.callback_threads.join(60)
    for _ in range(3):  # the thread that ran the callback still serves the device
        np.testing.assert_array_equal(t.numpy(), np.arange(4, dtype=np.float32))
    assert any("callback" in r.getMessage() for r in caplog.records)
    t.free()


def test_close_gives_up_on_work_behind_an_event_that_never_completes():
    from devicelayer.registry import _instantiate

    dev = _instantiate("devicelayer.backends.host:HostBackend").devices()[0]
    never = dl.UserEvent("never")
    buf = dev.pool.allocate(16)
    stuck = dev.pool.upload(buf, np.zeros(4, np.float32), wait=[never])
    with pytest.raises(dl.InvalidArgument, match="timeout"):
        dev.close(timeout=-1)
    dev.close(timeout=0.2)
    with pytest.raises(dl.EventError, match="closed before the work it waited for"):
        stuck.wait(5)
    with pytest.raises(dl.InvalidArgument, match="closed"):
        dev.pool.allocate(8)

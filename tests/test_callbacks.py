"""Done callbacks run on devicelayer's callback threads: one may submit work to any device and wait for it."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.events import callback_threads

LIMIT = 60  # seconds a callback's work may take before the test calls it a deadlock


def work_and_wait(device: dl.Device, seed: int) -> list[str]:
    """What a callback does: host work, work on ``device`` (direct, deferred behind a user event, a transfer
    and a free) and a synchronize, each waited for and checked; returns what went wrong."""
    wrong = []
    x = np.arange(16, dtype=np.float32) + seed
    h = dl.tensor(x, "host")
    if not np.array_equal(h.numpy(), x):
        wrong.append("host round trip")
    t = dl.tensor(x * 2, device)
    if not np.array_equal(t.numpy(), x * 2):
        wrong.append("device round trip")
    gate = dl.UserEvent("callback's gate")
    late = device.pool.upload(t.buffer, x * 3, wait=[gate])  # deferred: submitted by the dispatcher
    gate.set()
    late.wait(LIMIT)
    if not np.array_equal(t.numpy(), x * 3):
        wrong.append("deferred upload")
    moved = t.to("host" if device.id != "host" else dl.devices()[-1])
    if not np.array_equal(moved.numpy(), x * 3):
        wrong.append("transfer")
    device.synchronize()
    for ev in (moved.free(), t.free(), h.free()):
        ev.wait(LIMIT)
    return wrong


def events_to_hang_on(device: dl.Device) -> dict[str, tuple[dl.Event, dl.UserEvent | None]]:
    """Events of every kind a callback can be added to: a deferred one, a host task, a user event and the
    device's own (each with the user event that completes it, if any), in the order to register them."""
    buf = device.pool.allocate(64, np.float32)
    gate = dl.UserEvent("gate")
    host_gate = dl.UserEvent("host gate")
    hbuf = dl.device("host").pool.allocate(64, np.float32)
    user = dl.UserEvent("user")
    native = device.pool.upload(buf, np.ones(16, np.float32))
    found = {
        "deferred": (device.pool.upload(buf, np.ones(16, np.float32), wait=[gate]), gate),
        "host task": (dl.device("host").pool.upload(hbuf, np.ones(16, np.float32), wait=[host_gate]), host_gate),
        "user": (user, user),
        # last: where it is already complete its callback runs at once on the registering thread, and its work
        # queues in order behind the gated work above, so every gate must be open by then
        "native": (native, None),
    }
    device.pool.free(buf)
    dl.device("host").pool.free(hbuf)
    return found


@pytest.mark.timeout(300)
def test_a_callback_may_submit_work_anywhere_and_wait_for_it(device):
    outcome: dict[str, object] = {}
    finished = {}
    registering = set()  # a callback added to an event already complete runs at once, on this thread
    for kind, (event, opener) in events_to_hang_on(device).items():
        done = finished[kind] = threading.Event()

        def callback(ev, kind=kind, done=done):
            thread = threading.current_thread()
            where = "at once" if kind in registering and thread is threading.main_thread() else thread.name
            try:
                outcome[kind] = (where, work_and_wait(device, len(outcome)))
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                outcome[kind] = (where, [repr(exc)])
            finally:
                done.set()

        registering.add(kind)
        event.add_done_callback(callback)
        registering.discard(kind)
        if opener is not None:
            opener.set()
    for kind, done in finished.items():
        assert done.wait(LIMIT), f"a callback of a {kind} event that waits for work never finished (deadlock)"
    for kind, (where, wrong) in outcome.items():
        assert wrong == [], (kind, wrong)
        assert where.startswith("devicelayer-callback") or (kind == "native" and where == "at once"), (kind, where)


@pytest.mark.timeout(120)
def test_a_callback_waiting_for_another_callback_does_not_hold_it_back(device):
    """Callback A (first event) waits for a user event that only callback B (second event) sets."""
    handoff = dl.UserEvent("set by B")
    a_done = threading.Event()
    seen = []

    def a(_):
        try:
            handoff.wait(LIMIT)
            seen.append("A")
        finally:
            a_done.set()

    first, second = dl.UserEvent("first"), dl.UserEvent("second")
    first.add_done_callback(a)
    second.add_done_callback(lambda _: (seen.append("B"), handoff.set()))
    t = dl.tensor(np.ones(4, np.float32), device)
    t.ready.add_done_callback(lambda _: first.set())
    t.ready.add_done_callback(lambda _: second.set())
    assert a_done.wait(LIMIT), "callback A never got what callback B gives"
    assert seen == ["B", "A"]
    t.free().wait(LIMIT)


def test_an_events_callbacks_run_in_the_order_they_were_added():
    gate = dl.UserEvent("gate")
    order = []
    release = threading.Event()

    def first(_):
        release.wait(LIMIT)  # still running when the next ones are added
        order.append(1)

    gate.add_done_callback(first)
    gate.add_done_callback(lambda _: order.append(2))
    gate.set()
    gate.add_done_callback(lambda _: order.append(3))  # the event is done, but 1 and 2 have not run: queued
    release.set()
    assert callback_threads.join(LIMIT)
    assert order == [1, 2, 3]
    here = []
    gate.add_done_callback(lambda _: here.append(threading.current_thread()))  # all ran: at once, here
    assert here == [threading.current_thread()]


def test_callbacks_never_run_on_a_devices_own_thread(device):
    names = []
    events = []
    for _ in range(20):
        t = dl.tensor(np.ones(256, np.float32), device)
        t.ready.add_done_callback(lambda _: names.append(threading.current_thread().name))
        events.append(t.ready)
        t.free()
    for ev in events:
        ev.wait(LIMIT)  # complete (as devicelayer sees it): the callbacks are handed over
    assert callback_threads.join(LIMIT)
    assert len(names) == 20
    assert {n for n in names if not n.startswith("devicelayer-callback")} <= {threading.main_thread().name}

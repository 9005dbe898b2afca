"""Misuse of events: wait lists, timeouts, user events, callbacks, and work after a failed event."""

from __future__ import annotations

import math

import numpy as np

import devicelayer as dl
from devicelayer import EventError, EventTimeout, InvalidArgument

from .catalogue import Doomed, caused_by, misuse, misuses

A = "events"


def _gated_upload(s) -> dl.Event:
    """An upload waiting on a user event that is set only when the case ends."""
    return s.pool.upload(s.buffer(16), np.zeros(16, np.uint8), wait=[s.gate()])


misuses(A, _gated_upload, [
    ("event-wait-timeout", "wait 50 ms for work behind an unset user event", EventTimeout, "not complete after 0.05 s",
     lambda s, ev: ev.wait(0.05)),
    ("event-negative-timeout", "wait(-1)", InvalidArgument, "timeout must be a number of seconds >= 0",
     lambda s, ev: ev.wait(-1)),
    ("event-timeout-not-a-number", "wait('1')", InvalidArgument, "timeout must be a number of seconds >= 0",
     lambda s, ev: ev.wait("1")),
    ("event-timeout-nan", "wait(nan)", InvalidArgument, "timeout must be a number of seconds >= 0",
     lambda s, ev: ev.wait(math.nan)),
    ("event-callback-not-callable", "add_done_callback(42)", InvalidArgument, "expected a callable",
     lambda s, ev: ev.add_done_callback(42)),
])


def _buffer16(s) -> dl.Buffer:
    return s.buffer(16)


misuses(A, _buffer16, [
    ("wait-list-not-events", "upload after wait=['not an event']", InvalidArgument, "not an Event",
     lambda s, buf: s.pool.upload(buf, np.zeros(16, np.uint8), wait=["not an event"])),
    ("wait-list-not-a-sequence", "upload after wait=42", InvalidArgument, "must be a sequence of events",
     lambda s, buf: s.pool.upload(buf, np.zeros(16, np.uint8), wait=42)),
    ("wait-list-holds-none", "free after wait=[None]", InvalidArgument, "not an Event",
     lambda s, buf: s.pool.free(buf, wait=[None])),
    ("when-all-not-events", "when_all([1, 2])", InvalidArgument, "not an Event", lambda s, buf: dl.when_all([1, 2])),
])


class _Failed:
    """An int32 buffer whose upload failed (its user event failed), and a kernel to launch on it."""

    def __init__(self, s, device: dl.Device | None = None) -> None:
        device = device or s.device
        self.buffer = s.buffer(64, np.int32, device=device)
        self.data = np.zeros(16, np.int32)
        self.event = device.pool.upload(self.buffer, self.data, wait=[s.failed_gate()])
        self.program = s.program(device=device)


misuses(A, _Failed, [
    ("event-user-event-failed", "wait for an upload whose user event failed", EventError,
     "dependency 'doomed' failed", lambda s, f: f.event.wait(30)),
    ("event-upload-after-failure", "wait for an upload queued after a failed one", EventError, "dependency",
     lambda s, f: s.pool.upload(f.buffer, f.data, wait=[f.event]).wait(30)),
    ("event-launch-after-failure", "wait for a launch queued after a failed upload", EventError, "dependency",
     lambda s, f: s.device.launch(f.program, [f.buffer, 16], 16, wait=[f.event]).wait(30)),
    ("event-download-after-failure", "wait for a download queued after a failed upload", EventError, "dependency",
     lambda s, f: s.pool.download(f.buffer, np.empty(16, np.int32), wait=[f.event]).wait(30)),
], verify=caused_by(Doomed))


@misuse("event-failed-on-another-device", A, "wait for an upload queued after a failed upload of another device",
        EventError, "dependency", verify=caused_by(Doomed))
def _(s):
    failed, buf = _Failed(s, s.other()), s.buffer(64, np.int32)
    return lambda: s.pool.upload(buf, failed.data, wait=[failed.event]).wait(30)


@misuse("event-transfer-after-failure", A, "wait for a transfer to another device queued after a failed upload",
        EventError, "dependency", verify=caused_by(Doomed))
def _(s):
    failed, other = _Failed(s), s.other()

    def transfer_and_wait() -> None:
        copy, moved = dl.transfer(failed.buffer, other.pool, wait=[failed.event])
        s.keep(copy)
        moved.wait(30)
    return transfer_and_wait


def _set_event(s) -> dl.UserEvent:
    gate = dl.UserEvent("once")
    gate.set()
    return gate


misuses(A, _set_event, [
    ("user-event-set-twice", "set() a user event twice", InvalidArgument, "already completed",
     lambda s, gate: gate.set()),
    ("user-event-fail-after-set", "fail() a user event that was set", InvalidArgument, "already completed",
     lambda s, gate: gate.fail("too late")),
])


@misuse("user-event-fail-not-an-error", A, "fail(42) a user event", InvalidArgument,
        "takes an exception or a message")
def _(s):
    gate = s.gate()
    return lambda: gate.fail(42)

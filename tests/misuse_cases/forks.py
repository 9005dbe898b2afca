"""Misuse across os.fork(): a child using a device (or what was made of it) that the parent created.

Each case forks the test process; the call is made in the child, and what it raised there is raised again here
(same class, the child's message).  Creating devices afresh in the child is no misuse (tests/test_faults.py).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import devicelayer as dl
from devicelayer import BackendUnavailable
from forked import raise_in_parent, run_in_fork

from .catalogue import misuse

FORKED = "created before os.fork()"


def in_child(call: Callable[[], Any]) -> Callable[[], Any]:
    """The misuse: ``call`` made in a forked child (60 s at most), its exception raised here."""
    return lambda: raise_in_parent(run_in_fork(call, timeout=60))


@misuse("forked-device-allocate", "interface", "allocate, in a forked child, on a device the parent created",
        BackendUnavailable, FORKED)
def _(s):
    return in_child(lambda: s.pool.allocate(64))


@misuse("forked-device-upload", "transfers", "upload, in a forked child, into a buffer the parent allocated",
        BackendUnavailable, FORKED)
def _(s):
    buf = s.buffer(64, np.uint8)
    return in_child(lambda: s.pool.upload(buf, np.zeros(64, np.uint8)))


@misuse("forked-tensor-numpy", "transfers", "tensor.numpy(), in a forked child, of a tensor the parent made",
        BackendUnavailable, FORKED)
def _(s):
    t = s.tensor(np.arange(8, dtype=np.float32))
    return in_child(t.numpy)


@misuse("forked-device-launch", "launch", "launch, in a forked child, a program the parent compiled",
        BackendUnavailable, FORKED)
def _(s):
    prog, buf = s.program(), s.buffer(256, np.int32)
    return in_child(lambda: s.device.launch(prog, [buf, 64], 64))


@misuse("forked-device-compile", "compile", "compile, in a forked child, on a device the parent created",
        BackendUnavailable, FORKED)
def _(s):
    return in_child(lambda: s.program())


@misuse("forked-event-wait", "events", "wait, in a forked child, on work the parent submitted that was not done",
        BackendUnavailable, FORKED)
def _(s):
    pending = s.pool.upload(s.buffer(16), np.zeros(16, np.uint8), wait=[s.gate()])
    return in_child(lambda: pending.wait(30))


@misuse("forked-event-as-wait", "events",
        "pass, in a forked child, unfinished work the parent submitted as wait= of a new device's upload",
        BackendUnavailable, FORKED)
def _(s):
    pending = s.pool.upload(s.buffer(16), np.zeros(16, np.uint8), wait=[s.gate()])

    def call() -> None:
        host = dl.device("host")  # this child's own host device
        host.pool.upload(host.pool.allocate(16), np.zeros(16, np.uint8), wait=[pending])
    return in_child(call)


@misuse("forked-plan-run", "plan", "run, in a forked child, a plan the parent compiled", BackendUnavailable, FORKED)
def _(s):
    g = dl.Graph()
    g.output("y", g.relu(g.input("x", (8,))))
    plan = s.plan(g)
    return in_child(lambda: plan(x=np.ones(8, np.float32)))


@misuse("forked-backend-not-fork-safe", "interface",
        "device(), in a forked child, of a backend the parent started whose driver does not survive a fork",
        BackendUnavailable, "with os.fork()")
def _(s):
    from devicelayer.registry import _registry

    if getattr(type(_registry.load()[s.device.info.backend]), "fork_safe", False):
        pytest.skip(f"{s.device.info.backend} starts afresh in a forked child")
    return in_child(lambda: dl.device(s.device.id))

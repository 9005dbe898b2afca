"""The misuse catalogue: each case is one wrong use of the public API, the exception it must raise
(the exact class) and a fragment of its message.  ``docs/misuse.md`` lists the same cases as a table;
``tests/test_misuse.py`` runs every case on every device and checks that the device and the process
work normally afterwards.

A case is a function registered with ``@misuse(...)``: it receives a ``Scratch`` (the device, and
helpers that allocate things released after the case) and returns the misuse as a zero-argument
callable, so that setting up is never mistaken for the misuse itself.  ``misuses(...)`` registers a
table of cases that share their setup.
"""

from __future__ import annotations

import contextlib
import io
import threading
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

import devicelayer as dl
from kernels import INCREMENT, source

#: the areas of the public API, in the order of the table in docs/misuse.md
AREAS = ("interface", "transfers", "interop", "compile", "launch", "events", "graph", "placement", "plan", "onnx",
         "session", "cli")
#: areas whose cases also compile and run a small graph afterwards
GRAPH_AREAS = frozenset({"graph", "placement", "plan", "onnx", "session", "cli"})


class Doomed(RuntimeError):
    """The error the user events of failing cases fail with."""


class UsageExit(Exception):
    """The ``devicelayer`` command exited with status 2 after printing one line on stderr (the message)."""


@dataclass(frozen=True)
class Misuse:
    """One catalogued misuse: what is done wrong, and the exception and message it must give."""

    id: str
    area: str
    what: str
    error: type[BaseException]
    fragment: str
    setup: Callable[["Scratch"], Callable[[], Any]]
    verify: Callable[[BaseException], None] | None = None
    xfail: Callable[[dl.Device], str | None] | None = None

    @property
    def raises(self) -> str:
        """The exception column of the table."""
        return "exit status 2" if self.error is UsageExit else self.error.__name__

    def row(self) -> str:
        """The case's row of the table in docs/misuse.md."""
        return f"| `{self.id}` | {self.area} | {self.what} | {self.raises} | `{self.fragment}` |"


CATALOGUE: list[Misuse] = []


def misuse(id: str, area: str, what: str, error: type[BaseException], fragment: str, *,
           verify: Callable[[BaseException], None] | None = None,
           xfail: Callable[[dl.Device], str | None] | None = None) -> Callable:
    """Register the decorated setup function as catalogue case ``id``."""
    assert area in AREAS, area
    assert all(c.id != id for c in CATALOGUE), f"duplicate misuse id {id}"
    assert "|" not in what + fragment and "`" not in fragment, "the text must fit in a Markdown table cell"

    def register(setup: Callable[["Scratch"], Callable[[], Any]]) -> Callable:
        CATALOGUE.append(Misuse(id, area, what, error, fragment, setup, verify, xfail))
        return setup
    return register


def misuses(area: str, given: Callable[["Scratch"], Any] | None, rows: list[tuple], *,
            verify: Callable[[BaseException], None] | None = None) -> None:
    """Register cases that share their setup: ``given(scratch)`` makes what each row's misuse is done to.

    A row is ``(id, what, error, fragment, call)``; the misuse is ``call(scratch, given(scratch))``
    (``call(scratch, None)`` without ``given``).
    """
    for id, what, error, fragment, call in rows:
        misuse(id, area, what, error, fragment, verify=verify)(partial(_given, given, call))


def _given(given: Callable[["Scratch"], Any] | None, call: Callable[["Scratch", Any], Any],
           s: "Scratch") -> Callable[[], Any]:
    value = given(s) if given is not None else None
    return lambda: call(s, value)


def always(reason: str) -> Callable[[dl.Device], str]:
    """An ``xfail`` that applies on every device: ``reason`` names the fix the case waits for."""
    return lambda device: reason


def caused_by(kind: type[BaseException]) -> Callable[[BaseException], None]:
    """A ``verify`` that finds an exception of ``kind`` in the chain of causes."""
    def verify(exc: BaseException) -> None:
        chain = exc
        while chain is not None and not isinstance(chain, kind):
            chain = chain.__cause__
        assert chain is not None, f"{kind.__name__} is not in the causes of {exc!r}"
    return verify


class Scratch:
    """The device under test, and what a case sets up; everything is released when the case ends."""

    def __init__(self, device: dl.Device, tmp: Path) -> None:
        self.device = device
        self.pool = device.pool
        self.tmp = tmp
        self._buffers: list[dl.Buffer] = []
        self._gates: list[dl.UserEvent] = []
        self._plans: list[Any] = []
        self._threads: list[threading.Thread] = []

    # -- devices -------------------------------------------------------------------------------------------
    def other(self) -> dl.Device:
        """Another device than the one under test (the case is skipped where there is none)."""
        others = [d for d in dl.devices() if d is not self.device]
        if not others:
            pytest.skip("needs a second device")
        return others[0]

    def private_host(self) -> dl.Device:
        """A host device of its own, which a case may close (the shared devices stay open)."""
        from devicelayer.registry import _instantiate

        return _instantiate("devicelayer.backends.host:HostBackend").devices()[0]

    # -- memory ----------------------------------------------------------------------------------------------
    def keep(self, buffer: dl.Buffer) -> dl.Buffer:
        """Free ``buffer`` when the case ends (unless the case freed it)."""
        self._buffers.append(buffer)
        return buffer

    def buffer(self, nbytes: int = 64, dtype: Any = None, device: dl.Device | None = None) -> dl.Buffer:
        """A buffer of the device under test (or of ``device``)."""
        return self.keep((device or self.device).pool.allocate(nbytes, dtype))

    def freed(self, nbytes: int = 64, dtype: Any = None) -> dl.Buffer:
        """A buffer that has been freed."""
        buf = self.pool.allocate(nbytes, dtype)
        self.pool.free(buf).wait(30)
        return buf

    def tensor(self, array: Any, device: dl.Device | None = None) -> dl.Tensor:
        """A device tensor of ``array``."""
        t = dl.tensor(array, device or self.device)
        self.keep(t.buffer)
        return t

    def program(self, table: dict = INCREMENT, entry: str = "increment", device: dl.Device | None = None) -> dl.Program:
        """Test kernel ``entry`` of ``table`` compiled for the device under test (or ``device``)."""
        dev = device or self.device
        return dev.compile(source(table, dev), entry)

    # -- events and threads ----------------------------------------------------------------------------------
    def gate(self, label: str = "gate") -> dl.UserEvent:
        """A user event, set when the case ends if nothing completed it."""
        gate = dl.UserEvent(label)
        self._gates.append(gate)
        return gate

    def failed_gate(self, label: str = "doomed") -> dl.UserEvent:
        """A user event that failed with a Doomed error."""
        gate = dl.UserEvent(label)
        gate.fail(Doomed(f"{label} failed on purpose"))
        return gate

    def thread(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` in a thread, joined when the case ends."""
        t = threading.Thread(target=fn, daemon=True)
        self._threads.append(t)
        t.start()

    # -- graphs ------------------------------------------------------------------------------------------------
    def plan(self, graph: Any) -> Any:
        """``graph`` compiled for the device under test; released when the case ends."""
        plan = graph.compile([self.device.id])
        self._plans.append(plan)
        return plan

    def path(self, name: str) -> Path:
        """A path in the case's temporary directory."""
        return self.tmp / name

    # -- end -----------------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Complete the gates, join the threads, free the buffers and release the plans."""
        for gate in self._gates:
            if not gate.done:
                gate.set()
        for t in self._threads:
            t.join(30)
            assert not t.is_alive(), "a thread of the case did not finish"
        for buf in self._buffers:
            if not buf.freed:
                buf.pool.free(buf).wait(30)
        for plan in self._plans:
            plan.release()
        for dev in dl.devices():
            dev.synchronize()


def live_buffers() -> dict[str, int]:
    """Allocations not yet released, per device."""
    return {d.id: d.pool.live_buffers for d in dl.devices()}


def assert_no_leak(before: dict[str, int], timeout: float = 3.0) -> None:
    """No device holds more allocations than ``before`` (releases may complete a moment later; fewer is what earlier
    tests dropped being released meanwhile, not a leak)."""
    def grown() -> bool:
        now = live_buffers()
        return any(now[d] > n for d, n in before.items())
    deadline = time.monotonic() + timeout
    while grown() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not grown(), f"buffers leaked: before {before}, after {live_buffers()}"


def still_works(device: dl.Device) -> None:
    """A full round trip plus a launch: the device is usable and correct."""
    prog = device.compile(source(INCREMENT, device), "increment")
    data = np.arange(33, dtype=np.int32)
    buf = device.pool.allocate(data.nbytes, np.int32)
    device.pool.upload(buf, data)
    device.launch(prog, [buf, 33], 33)
    out = np.empty_like(data)
    device.pool.download(buf, out).wait(30)
    np.testing.assert_array_equal(out, data + 1)
    device.pool.free(buf).wait(30)


_X = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
_W = np.linspace(0.5, 2, 8, dtype=np.float32).reshape(4, 2)


def graph_works(device: dl.Device) -> None:
    """A small graph compiles, runs on the device and matches NumPy."""
    g = dl.Graph("after")
    x = g.input("x", _X.shape)
    g.output("y", g.matmul(g.relu(x), g.constant(_W)))
    plan = g.compile([device.id])
    try:
        got = plan(x=_X)["y"]
    finally:
        plan.release()
    np.testing.assert_allclose(got, np.maximum(_X, 0) @ _W, rtol=1e-5, atol=1e-6)


def cli(*argv: str) -> None:
    """Run ``devicelayer ARGV`` in this process; a usage error (exit status 2) raises UsageExit(message).

    The command must print exactly one line on stderr for it, never a traceback.
    """
    from devicelayer.cli import main

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            status = main(list(argv))
        except SystemExit as exc:
            status = exc.code
    text = err.getvalue()
    if status == 0:
        return
    lines = text.strip().splitlines()
    assert status == 2, f"exit status {status}, not 2: {text}"
    assert len(lines) == 1 and "Traceback" not in text, f"not a one-line error:\n{text}"
    raise UsageExit(lines[0])


def table() -> str:
    """The rows of docs/misuse.md's table, in area order."""
    cases = sorted(CATALOGUE, key=lambda c: AREAS.index(c.area))
    return "\n".join(c.row() for c in cases)

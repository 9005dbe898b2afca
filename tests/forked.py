"""Running a function in a child made with ``os.fork()`` from the test process (its devices, threads and all)."""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any, Callable

import devicelayer as dl


class ChildHung(AssertionError):
    """The forked child did not finish in time; it was killed."""


def run_in_fork(fn: Callable[[], Any], timeout: float = 60.0) -> dict[str, Any]:
    """``fn()`` in a forked child: ``{"value": ..., "seconds": s}`` (a JSON-able value), or ``{"error": class name,
    "message": ..., "seconds": s}`` where it raised.  ChildHung where the child took longer than ``timeout`` (it is
    killed, never waited for)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the test runner
        status = 1
        try:
            os.close(read)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.alarm(int(timeout) + 30)  # (a safety net: the parent kills it first)
            t0 = time.monotonic()
            try:
                report = {"value": fn()}
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                report = {"error": type(exc).__name__, "message": str(exc)}
            report["seconds"] = time.monotonic() - t0
            with os.fdopen(write, "w") as fh:
                json.dump(report, fh, default=repr)
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read)
            raise ChildHung(f"the forked child did not finish within {timeout} s")
        time.sleep(0.02)
    with os.fdopen(read) as fh:
        text = fh.read()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and text, f"the child failed (status {status})"
    return json.loads(text)


def raise_in_parent(report: dict[str, Any]) -> Any:
    """Raise here what the child raised (devicelayer's class, the child's message); else return its value."""
    if "error" not in report:
        return report["value"]
    cls = getattr(dl, report["error"], None)
    if not (isinstance(cls, type) and issubclass(cls, BaseException)):
        raise AssertionError(f"the child raised {report['error']}: {report['message']}")
    raise cls(report["message"])

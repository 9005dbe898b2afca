"""Devices across the life of the process: a fork, and the interpreter's exit.

Fork: a child process has none of the parent's threads (device workers, the
dispatcher, driver threads) and a copy of driver state that the driver does not
expect to be used twice.  In a child, every device created before ``os.fork()``
is marked unusable: its calls (and those of its pools, buffers, programs,
recordings, tensors and plans) raise ``BackendUnavailable`` at once instead of
waiting forever on a thread that is not there, and its native objects are never
released in the child (the driver would be entered from a process it does not
know).  ``devicelayer.devices()`` in the child starts the backends afresh where
they can (``Backend.fork_safe``) and reports the others unavailable.

Exit: the interpreter releases what the program still holds, and some drivers
wait for the device's work when an object is released (a driver binding may wait for a
host transfer's event, for one).  Work the program gave up on (a kernel that
never ends, whose ``wait(timeout)`` raised ``EventTimeout``) would then hold the
process forever.  And objects that the collector frees last, in reference cycles,
reach the driver in no set order, possibly after its binding's own exit handlers ran (a
process using NVIDIA's OpenCL driver crashed in that collection, depending on the order).  So at exit, every
device and its objects are kept, never released: the process's memory goes with it
anyway, and each driver's native exit handler tears down what it holds.
Drivers also tear down what they still hold in their own native exit handlers,
after the interpreter has finalized (NVIDIA's Vulkan driver waits there for the
device to go idle).  So where work is still running at exit, the C library's
exit ends the process with its exit status as soon as the interpreter has
finalized (Python's own files are flushed and closed by then), skipping the
native exit handlers of the libraries loaded before (where the C library has
``on_exit``, as glibc does).
"""

from __future__ import annotations

import atexit
import gc
import os
import warnings
import weakref
from typing import Any, Callable

_devices: "weakref.WeakSet[Any]" = weakref.WeakSet()


def _immortal(obj: Any) -> Any:
    """``obj`` with one reference that is never given back: finalization does not release it."""
    try:
        import ctypes

        ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))
    except (ImportError, AttributeError):  # not CPython: no reference counts for finalization to drop
        pass
    return obj


#: what the process keeps until it ends, finalization included
_kept: list[Any] = _immortal([])


def keep_forever(obj: Any) -> None:
    """Never release ``obj`` in this process (native objects a driver must not see released here)."""
    _kept.append(obj)


def track(device: Any) -> None:
    """Follow ``device`` through forks and the interpreter's exit (``Device.__init__`` calls it)."""
    _devices.add(device)


def _after_fork_in_child() -> None:
    """Mark every device of the parent as created before the fork (and keep it: it is never released here)."""
    for device in list(_devices):
        device._after_fork_in_child()
        keep_forever(device)


def _at_exit() -> None:
    """Keep every device and its objects past finalization; where work is still running (not in a forked child),
    end the process before the drivers' native exit handlers."""
    devices = list(_devices)
    keep_forever(devices)
    keep_forever(_objects_of(devices))
    if any(not d._forked and d._has_pending_work() for d in devices):
        _end_before_native_exit_handlers()


def _end_before_native_exit_handlers() -> bool:
    """Have the C library's ``exit`` call ``_exit(status)`` before the native exit handlers registered so far
    (drivers' teardown, which may wait for the work still running); False where the C library cannot."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        on_exit = libc.on_exit  # glibc: handlers run as handler(status, arg), newest first
    except (OSError, AttributeError, ImportError):
        return False
    on_exit.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    on_exit.restype = ctypes.c_int
    return on_exit(ctypes.cast(libc._exit, ctypes.c_void_p), None) == 0


def _objects_of(devices: list[Any]) -> list[Any]:
    """Every event, buffer, program and recording of ``devices`` that the collector can find."""
    from .device import Program
    from .events import Event
    from .memory import Buffer
    from .recording import Recording

    ids = {id(d) for d in devices}
    found: list[Any] = []
    with warnings.catch_warnings():  # (isinstance asks every object its __class__: some warn when asked)
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            try:
                if isinstance(obj, (Event, Program, Recording)):
                    owner = obj.device
                elif isinstance(obj, Buffer):
                    owner = obj.pool.device
                else:
                    continue
            except Exception:  # noqa: BLE001 - (a proxy of something gone, say): not a device's object
                continue
            if id(owner) in ids:
                found.append(obj)
    return found


def in_forked_child(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Run ``fn`` in the child after ``os.fork()`` (where the platform forks): a module's fresh locks, threads and
    queues.  Returns ``fn``, so it serves as a decorator."""
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=fn)
    return fn


atexit.register(_at_exit)
in_forked_child(_after_fork_in_child)

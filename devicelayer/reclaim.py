"""Cleanup of objects the program dropped, run on a thread of its own instead of inside the garbage collector.

The collector runs finalizers on whichever thread allocates when it decides to
collect, and that thread may hold a devicelayer lock at the time (an event's
state, a pool's counters).  A finalizer that freed device memory there would
wait on a lock its own thread holds, or re-enter a structure halfway through a
change.  So a finalizer registered here only queues its work (``SimpleQueue.put``
is safe in a finalizer) and the ``devicelayer-reclaim`` thread runs it.
"""

from __future__ import annotations

import logging
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any

from . import cpus, lifecycle

log = logging.getLogger("devicelayer")

_work: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]]] = queue.SimpleQueue()
_thread: threading.Thread | None = None
_start_lock = threading.Lock()


def on_drop(obj: Any, fn: Callable[..., Any], *args: Any) -> weakref.finalize:
    """Run ``fn(*args)`` on the reclaim thread once ``obj`` is garbage (not at interpreter exit, when the
    process's memory goes with it).  ``fn`` and ``args`` must not refer to ``obj``."""
    _start()
    finalizer = weakref.finalize(obj, _work.put, (fn, args))
    finalizer.atexit = False
    return finalizer


def drain(timeout: float | None = None) -> bool:
    """Wait until the cleanup queued so far has run; False if ``timeout`` passed first.

    Returns at once on the reclaim thread itself.  The caller must hold no lock that queued cleanup takes.
    """
    if _thread is None or threading.current_thread() is _thread:
        return True
    reached = threading.Event()
    _work.put((reached.set, ()))
    return reached.wait(timeout)


def _start() -> None:
    global _thread
    if _thread is not None:
        return
    with _start_lock:
        if _thread is None:
            thread = threading.Thread(target=_loop, name="devicelayer-reclaim", daemon=True)
            thread.start()
            _thread = thread


def _loop() -> None:
    cpus.use_every_cpu()
    work = _work
    while True:
        fn, args = work.get()
        try:
            fn(*args)
        except Exception:  # one failed cleanup must not stop the others
            log.exception("devicelayer: cleanup of a dropped object raised")
        del fn, args


def _reinit_after_fork() -> None:
    """In a forked child: no reclaim thread yet, and a new queue.  Cleanup the parent queued (and objects of the
    parent dropped here, whose finalizers put into the old queue) is never run: it would release the parent's
    native objects from a process their driver does not know."""
    global _work, _thread, _start_lock
    lifecycle.keep_forever(_work)
    _work = queue.SimpleQueue()
    _thread = None
    _start_lock = threading.Lock()


lifecycle.in_forked_child(_reinit_after_fork)

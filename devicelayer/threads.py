"""Helper threads that never hold up the interpreter's exit, and that a forked child starts afresh.

``concurrent.futures.ThreadPoolExecutor`` joins its threads when the interpreter
exits, so a thread blocked in a driver wait on work that never ends (a kernel
stuck in a loop, whose ``wait(timeout)`` the caller gave up on) would hold the
process forever; and after ``os.fork()`` an executor believes it still has the
threads of the parent, so work submitted in the child never runs.  ``DaemonPool``
runs tasks on daemon threads started on demand, and forgets its threads in a
forked child.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Any, Callable

from . import lifecycle


class DaemonPool:
    """Up to ``max_workers`` daemon threads (``name-N``) running submitted calls, ``initializer`` first on each."""

    def __init__(self, max_workers: int, name: str, initializer: Callable[[], Any] | None = None) -> None:
        self._max = max(1, max_workers)
        self._name = name
        self._initializer = initializer
        self._reset()
        lifecycle.in_forked_child(self._reset)

    def _reset(self) -> None:
        """Forget every thread and queued task (a forked child has none of the parent's threads; its tasks are
        kept, never run nor released here)."""
        if hasattr(self, "_tasks"):
            lifecycle.keep_forever(self._tasks)
        self._tasks: queue.SimpleQueue[tuple[Future, Callable[..., Any], tuple[Any, ...]]] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._started = 0

    @property
    def max_workers(self) -> int:
        """The most threads the pool starts."""
        return self._max

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Run ``fn(*args)`` on a pool thread; the Future gives its result or exception."""
        future: Future = Future()
        self._tasks.put((future, fn, args))
        if self._idle.acquire(blocking=False):
            return future  # an idle thread takes it
        with self._lock:
            if self._started < self._max:
                self._started += 1
                threading.Thread(target=self._work, args=(self._tasks, self._idle),
                                 name=f"{self._name}-{self._started}", daemon=True).start()
        return future

    def _work(self, tasks: queue.SimpleQueue, idle: threading.Semaphore) -> None:
        if self._initializer is not None:
            self._initializer()
        result = None
        while True:
            future, fn, args = tasks.get()
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args)
                except BaseException as exc:  # reported through the future, as an executor does
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            future = fn = args = result = None  # hold nothing of a finished task while idle
            idle.release()

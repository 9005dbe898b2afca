"""Ctrl-C while devicelayer updates its own state: the KeyboardInterrupt waits until the update is whole.

Python raises KeyboardInterrupt in the main thread between any two steps of its code.  Raised half-way
through a submission (a queue's timeline value taken but never submitted, a buffer allocated but not yet
owned by the run that frees it), it would leave a device unusable or memory held for good.  So where the
program left Python's own SIGINT handler in place, devicelayer's handler takes its place: when the main
thread is inside a function marked ``@protected`` it has the signal sent again a moment later (by a
thread of its own, ``devicelayer-sigint``), until it arrives outside; anywhere else it raises
KeyboardInterrupt at once, as Python's does.  Waits are never protected: Ctrl-C
ends a wait at once (the work goes on).  A handler the program installs itself replaces this one.
"""

from __future__ import annotations

import _signal
import queue
import signal
import threading
import time
from types import CodeType, FrameType
from typing import Any, Callable, TypeVar

from . import lifecycle

F = TypeVar("F", bound=Callable[..., Any])

_protected: set[CodeType] = set()
#: signals to send the main thread again (put from the handler: SimpleQueue.put is safe there, a lock is not)
_again: queue.SimpleQueue[int] = queue.SimpleQueue()
#: how long the main thread is given to leave a protected function before the signal is sent again
RESEND_SECONDS = 0.002
_SIGINT = int(signal.SIGINT)


def protected(fn: F) -> F:
    """Mark ``fn``: a Ctrl-C arriving while it runs (in the main thread) is raised once it has returned.

    ``fn`` must not wait for long: a Ctrl-C is held for as long as it runs."""
    _protected.add(fn.__code__)
    return fn


def inside_protected(frame: FrameType | None) -> bool:
    """True when ``frame`` or a frame that called it is a protected function's."""
    while frame is not None:
        if frame.f_code in _protected:
            return True
        frame = frame.f_back
    return False


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    """SIGINT: KeyboardInterrupt now, or (inside a protected function) once the main thread is out of it."""
    if inside_protected(frame):
        _again.put(signum)
        _start_sender()  # (one that is not running would lose the signal held here)
        return
    signal.default_int_handler(signum, frame)


def _resend(main: int) -> None:
    """The ``devicelayer-sigint`` thread: send each signal held back to the main thread again, a moment later."""
    while True:
        signum = _again.get()
        time.sleep(RESEND_SECONDS)
        try:
            signal.pthread_kill(main, signum)
        except (OSError, ValueError):  # the main thread has ended
            return


def install() -> None:
    """Take over SIGINT where Python's default handler is in place (from the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return
        signal.signal(signal.SIGINT, _on_sigint)
    except (ValueError, OSError):  # an embedded interpreter without signals
        return
    _start_sender()


_sender: threading.Thread | None = None


def _start_sender() -> None:
    """Start the ``devicelayer-sigint`` thread for the main thread unless it is running."""
    global _sender
    if _sender is None or not _sender.is_alive():
        _sender = threading.Thread(target=_resend, args=(threading.main_thread().ident,), name="devicelayer-sigint",
                                   daemon=True)
        _sender.start()


def _reinit_after_fork() -> None:
    """In a forked child: the sender thread stayed in the parent; start one of the child's own if the handler
    is in place (the forking thread is the child's main thread)."""
    global _again, _sender
    _again = queue.SimpleQueue()
    _sender = None
    if installed():
        _start_sender()


lifecycle.in_forked_child(_reinit_after_fork)


def installed() -> bool:
    """True while devicelayer's SIGINT handler is the process's (asked of ``_signal``: ``signal.getsignal``
    costs microseconds converting the answer into an enum, on every inline host task)."""
    return _signal.getsignal(_SIGINT) is _on_sigint

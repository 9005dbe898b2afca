"""Events: completion of asynchronous work, on any backend, with sticky failure.

``Event`` is the one type every asynchronous call returns.  A backend subclass
overrides ``_poll``/``_block``/``_watch`` to read its native completion; work
that finishes by itself (host tasks, user events, deferred submissions) calls
``_finish`` directly.

Two kinds of completion callbacks: the program's (``add_done_callback``) run on
devicelayer's callback threads, which do no device work, so a callback may submit
work anywhere and wait for it; devicelayer's own (``_on_done``) run at once on the
thread that completes the event and never block.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from typing import Any, Callable, Iterable, Sequence

from . import cpus, lifecycle
from .errors import BackendUnavailable, EventError, EventTimeout, InvalidArgument
from .interrupts import protected
from .threads import DaemonPool

log = logging.getLogger("devicelayer")

#: threads that block on native events which have no completion callback of their own (daemon threads: the
#: interpreter's exit does not wait for work the program gave up on)
_waiters = DaemonPool(16, "devicelayer-waiter", initializer=cpus.use_every_cpu)
#: the longest the main thread blocks at a time in a wait of devicelayer's own: an untimed lock wait was seen to
#: hold a Ctrl-C until the lock was released (CUDA plans on an H100, Python 3.12), so the main thread waits in
#: slices and Python's SIGINT handler runs between them
MAIN_WAIT_SLICE = 0.05
#: guards the completion state of every event (critical sections are a few assignments)
_state_lock = threading.Lock()


def _reinit_after_fork() -> None:
    """In a forked child: a fresh state lock (a thread of the parent may have held it at the fork)."""
    global _state_lock
    _state_lock = threading.Lock()


def forked_error(event: "Event") -> BackendUnavailable | None:
    """The error for waiting, in a forked child, on work the parent submitted to a device; None otherwise."""
    device = event.device
    if device is None or not getattr(device, "_forked", False):
        return None
    return BackendUnavailable(f"{event.label}: {device.id} was created before os.fork(); the work was submitted "
                              f"in the parent process and cannot complete in this child")


class Event:
    """Completion of an asynchronous operation: ``wait()``, ``done``, ``error``.

    A failed event stays failed; every event that waits on it fails too, with
    the cause chained.  While the work runs, the event keeps alive every host
    array and buffer the work touches.
    """

    __slots__ = ("label", "device", "_keepalive", "_flag", "_done", "_error", "_callbacks", "_hooks", "_watched",
                 "__weakref__", "__dict__")

    def __init__(self, label: str, device: Any = None, keepalive: Sequence[Any] = ()) -> None:
        self.label = label
        self.device = device
        self._keepalive = keepalive
        self._flag: threading.Event | None = None  # made on first blocking wait
        self._done = False
        self._error: BaseException | None = None
        #: the program's callbacks: pending, then (once done) still to be run by a callback thread; None when none
        self._callbacks: list[Callable[[Event], None]] | None = None
        self._hooks: list[Callable[[Event], None]] | None = None  # devicelayer's own, run inline on completion
        self._watched = False

    def _signal(self) -> threading.Event:
        """The threading.Event set on completion (made on demand: most events are never waited on)."""
        with _state_lock:
            if self._flag is None:
                self._flag = threading.Event()
                if self._done:
                    self._flag.set()
            return self._flag

    # -- hooks for native events -------------------------------------------------
    def _poll(self) -> bool:
        """True when the native work has finished; never blocks."""
        return False

    def _block(self, timeout: float | None) -> bool:
        """Block until the work finished or ``timeout`` passed; True when it finished."""
        flag = self._signal()
        if threading.current_thread() is not threading.main_thread():
            return flag.wait(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:  # in slices, so a Ctrl-C ends the wait within one slice
            left = MAIN_WAIT_SLICE if deadline is None else min(MAIN_WAIT_SLICE, deadline - time.monotonic())
            if flag.wait(max(left, 0.0)):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def _native_error(self) -> BaseException | None:
        """The error the native work ended with, read once it has finished."""
        return None

    def _poll_until(self, timeout: float) -> bool:
        """Poll ``_poll`` with growing sleeps (20 us to 1 ms) until it is true or ``timeout`` passes."""
        deadline = time.perf_counter() + timeout
        pause = 20e-6
        while not self._poll():
            left = deadline - time.perf_counter()
            if left <= 0:
                return False
            time.sleep(min(pause, left))
            pause = min(pause * 2, 1e-3)
        return True

    def _watch(self) -> None:
        """Arrange for ``_finish`` to be called when the native work finishes.

        The default blocks a waiter thread in ``_block``; events completed by their own
        producer (user events, host tasks, deferred submissions) need none.
        """
        if type(self)._block is not Event._block:
            _waiters.submit(self._wait_and_finish)

    def _wait_and_finish(self) -> None:
        try:
            self._block(None)
            err = self._native_error()
        except BaseException as exc:  # a driver error while waiting is the event's error
            err = exc
        self._finish(err)

    # -- completion --------------------------------------------------------------
    @protected
    def _finish(self, error: BaseException | None = None) -> None:
        """Mark the event complete (failed when ``error`` is given): run devicelayer's hooks here, and hand the
        program's callbacks to a callback thread."""
        with _state_lock:
            if self._done:
                return
            self._error = error
            self._done = True
            hooks, self._hooks = self._hooks, None
            callbacks = self._callbacks  # stays set until the callback thread has run them all (order)
            kept, self._keepalive = self._keepalive, ()
            flag = self._flag
        del kept  # outside the lock: what the work kept alive may run code as it is deallocated
        if flag is not None:
            flag.set()
        if hooks:
            for hook in hooks:
                _run_hook(hook, self)
        if callbacks:
            callback_threads.submit(self)

    # -- public ------------------------------------------------------------------
    @property
    def done(self) -> bool:
        """True once the work has finished, successfully or not."""
        if not self._done:
            forked = forked_error(self)
            if forked is not None:
                raise forked
            if self._poll():
                self._finish(self._native_error())
        return self._done

    @property
    def error(self) -> BaseException | None:
        """The exception the work failed with; None while running or after success."""
        return self._error if self.done else None

    def wait(self, timeout: float | None = None) -> None:
        """Block until the work is complete; raise ``EventError`` if it failed, ``EventTimeout`` on timeout."""
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or not timeout >= 0):
            raise InvalidArgument(f"timeout must be a number of seconds >= 0, or None; got {timeout!r}")
        if timeout is not None and timeout > threading.TIMEOUT_MAX:  # (inf, 1e300): as long as it takes
            timeout = None
        if not self.done:  # (in a forked child, work of the parent's devices raises BackendUnavailable here)
            callback_thread = callback_threads.enter_wait()
            try:
                finished = self._block(timeout)
            except EventError:
                raise
            except Exception as exc:  # a driver error while waiting is the work's error
                self._finish(exc)
                finished = True
            # anything else (KeyboardInterrupt, SystemExit, ...) is the caller's interruption, not the work's
            # failure: it reaches the caller and the work goes on
            finally:
                if callback_thread:
                    callback_threads.leave_wait()
            if not finished:
                raise EventTimeout(f"{self.label}: not complete after {timeout} s")
            if not self._done:
                self._finish(self._native_error())
        if self._error is not None:
            raise EventError(f"{self.label} failed: {self._error}") from self._error

    def add_done_callback(self, fn: Callable[["Event"], None]) -> None:
        """Call ``fn(event)`` once the event completes, on a devicelayer callback thread (one that runs no
        device's work, so ``fn`` may submit work and wait for it); an event's callbacks run one after another
        in the order they were added.  Once the event is complete and its earlier callbacks have run, ``fn``
        runs at once on the calling thread.  What ``fn`` raises is logged."""
        if not callable(fn):
            raise InvalidArgument(f"add_done_callback: expected a callable, got {type(fn).__name__}")
        if not self._done:
            forked = forked_error(self)
            if forked is not None:  # (it would never complete here)
                raise forked
        with _state_lock:
            if self._done and self._callbacks is None:
                pending = False
            else:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)  # pending, or behind the callbacks a callback thread is running
                pending = True
        if not pending:
            _run_callback(fn, self)
        else:
            self._start_watch()

    @protected
    def _on_done(self, fn: Callable[["Event"], None]) -> None:
        """devicelayer's own completion hook: ``fn(event)`` runs on the thread that completes the event (at once
        if it is complete), before the program's callbacks; it must neither block nor wait."""
        with _state_lock:
            if not self._done:
                if self._hooks is None:
                    self._hooks = []
                self._hooks.append(fn)
                fn = None  # type: ignore[assignment]
        if fn is not None:
            _run_hook(fn, self)
        else:
            self._start_watch()

    @protected
    def _start_watch(self) -> None:
        """Make sure something will call ``_finish`` (once per event)."""
        with _state_lock:
            if self._watched or self._done:
                return
            self._watched = True
        if not self.done:
            self._watch()

    def __repr__(self) -> str:
        state = "pending" if not self._done else ("failed" if self._error else "done")
        return f"<{type(self).__name__} {self.label!r} {state}>"


def _run_callback(cb: Callable[[Event], None], ev: Event) -> None:
    try:
        cb(ev)
    except BaseException as exc:  # a callback must never break completion of others, nor the thread it runs on
        if isinstance(exc, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():
            raise
        log.exception("devicelayer: callback of %s raised", ev.label)


def _run_hook(hook: Callable[[Event], None], ev: Event) -> None:
    try:
        hook(ev)
    except Exception:  # noqa: BLE001 - one hook's bug must not keep the others (and the callbacks) from running
        log.exception("devicelayer: completion hook of %s raised", ev.label)


class CallbackThreads:
    """The threads that run the program's done callbacks.

    One thread at first; another starts when a callback is waiting to run and every callback thread is
    blocked in a devicelayer wait (``Event.wait``, ``Device.synchronize``), so a callback that waits for what
    another callback does cannot hold the rest back.  Up to ``MAX_THREADS``; those past the first end after
    ``IDLE_SECONDS`` without work.  An event's callbacks run on one thread, in order.
    """

    MAX_THREADS = 32
    IDLE_SECONDS = 2.0

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._jobs: collections.deque[Event] = collections.deque()
        self._threads = 0   # started and not ended
        self._idle = 0      # waiting for a job
        self._blocked = 0   # inside a devicelayer wait while running a callback
        self._busy = 0      # jobs being run
        self._idents: set[int] = set()
        self._serial = 0

    def submit(self, ev: Event) -> None:
        """Run ``ev``'s callbacks on a callback thread."""
        with self._cond:
            self._jobs.append(ev)
            if self._idle:
                self._cond.notify()
            elif self._threads - self._blocked <= 0:
                self._spawn()

    def _spawn(self) -> None:
        """Start one more thread (lock held) unless ``MAX_THREADS`` run already."""
        if self._threads >= self.MAX_THREADS:
            return
        self._threads += 1
        self._serial += 1
        t = threading.Thread(target=self._loop, name=f"devicelayer-callback-{self._serial}", daemon=True)
        try:
            t.start()
        except RuntimeError:  # interpreter shutdown: no new threads
            self._threads -= 1

    def enter_wait(self) -> bool:
        """Called before a devicelayer wait: True on a callback thread, which may then be stood in for."""
        if threading.get_ident() not in self._idents:
            return False
        with self._cond:
            self._blocked += 1
            if self._jobs and not self._idle and self._threads - self._blocked <= 0:
                self._spawn()
        return True

    def leave_wait(self) -> None:
        """Called after a wait that ``enter_wait`` counted."""
        with self._cond:
            self._blocked -= 1

    def join(self, timeout: float | None = None) -> bool:
        """Wait until every callback handed over so far has run; False if some still run after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._jobs or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(0.01 if left is None else min(left, 0.01))
            return True

    @property
    def threads(self) -> int:
        """Callback threads alive now."""
        return self._threads

    def _loop(self) -> None:
        cpus.use_every_cpu()
        me = threading.get_ident()
        with self._cond:
            self._idents.add(me)
        ev: Event | None = None
        try:
            while True:
                with self._cond:
                    while not self._jobs:
                        self._idle += 1
                        woken = self._cond.wait(None if self._threads == 1 else self.IDLE_SECONDS)
                        self._idle -= 1
                        if not woken and not self._jobs and self._threads > 1:
                            return
                    ev = self._jobs.popleft()
                    self._busy += 1
                try:
                    self._run(ev)
                finally:
                    ev = None
                    with self._cond:
                        self._busy -= 1
                        if not self._jobs and not self._busy:
                            self._cond.notify_all()  # join()
        finally:
            with self._cond:
                self._threads -= 1
                self._idents.discard(me)
                if self._jobs and self._threads - self._blocked <= 0:
                    self._spawn()

    @staticmethod
    def _run(ev: Event) -> None:
        """Run ``ev``'s callbacks in order, those added while they run too."""
        while True:
            with _state_lock:
                pending = ev._callbacks
                if not pending:
                    ev._callbacks = None
                    return
                fn = pending.pop(0)
            _run_callback(fn, ev)


callback_threads = CallbackThreads()


class UserEvent(Event):
    """An event the program completes itself: ``set()`` or ``fail(exc)``; gates work on host conditions."""

    def __init__(self, label: str = "user event") -> None:
        super().__init__(label)
        self._settled = False

    def set(self) -> None:
        """Complete the event successfully."""
        self._settle(None)

    def fail(self, error: BaseException | str) -> None:
        """Complete the event with an error; every event waiting on it fails."""
        if not isinstance(error, (BaseException, str)):
            raise InvalidArgument(f"{self.label}: fail() takes an exception or a message, got {type(error).__name__}")
        self._settle(error if isinstance(error, BaseException) else EventError(error))

    @protected
    def _settle(self, error: BaseException | None) -> None:
        """Complete the event once; a second set() or fail() is refused, not ignored."""
        with _state_lock:
            if self._settled:
                state = "failed" if self._error is not None else "set"
                raise InvalidArgument(f"{self.label}: the user event was already completed ({state})")
            self._settled = True
        self._finish(error)


class CompletedEvent(Event):
    """An event that is complete from birth (optionally failed)."""

    def __init__(self, label: str = "completed", error: BaseException | None = None, device: Any = None) -> None:
        super().__init__(label, device)
        self._finish(error)


class DeferredEvent(Event):
    """An operation whose submission waits on events the device cannot wait on natively.

    Once submitted it follows the native event it was given (``bind``).
    """

    def __init__(self, label: str, device: Any, keepalive: Sequence[Any] = ()) -> None:
        super().__init__(label, device, keepalive)
        self.native: Event | None = None

    @protected
    def bind(self, native: Event) -> None:
        """Follow ``native`` from now on: complete when it completes, with its error."""
        self.native = native
        native._on_done(lambda ev: self._finish(ev.error))

    def _poll(self) -> bool:
        native = self.native
        return native is not None and native.done and self._done

    def _watch(self) -> None:
        """Nothing to watch: ``_finish`` comes from the submission (``bind``'s callback or a failure).

        A waiter thread must never block on a deferred event: waiters are for submitted native
        work, which completes by itself; parking them here can starve the natives of waiters.
        """


def dependency_error(ev: Event, label: str) -> EventError:
    """The error given to work ``label`` because the event it waits on failed."""
    err = EventError(f"{label}: dependency {ev.label!r} failed: {ev.error}")
    err.__cause__ = ev.error
    return err


def check_events(wait: Iterable[Any] | None, where: str) -> tuple[Event, ...]:
    """Validate a ``wait=`` list: a sequence of Event objects."""
    if wait is None:
        return ()
    if isinstance(wait, Event):
        return (wait,)
    try:
        events = tuple(wait)
    except TypeError:
        raise InvalidArgument(f"{where}: wait= must be a sequence of events, got {type(wait).__name__}") from None
    for e in events:
        if not isinstance(e, Event):
            raise InvalidArgument(f"{where}: wait= holds {type(e).__name__}, not an Event")
        if not e._done and e.device is not None:
            forked = forked_error(e)
            if forked is not None:  # (it would never complete here)
                raise forked
    return events


@protected
def when_all(events: Iterable[Event], label: str = "when_all") -> Event:
    """An event that completes when all ``events`` have; it fails with the first failure."""
    events = check_events(events, label)
    join = Event(label)
    remaining = [len(events)]
    lock = threading.Lock()
    if not events:
        join._finish()
        return join

    def one_done(ev: Event) -> None:
        if ev.error is not None:
            join._finish(dependency_error(ev, label))
            return
        with lock:
            remaining[0] -= 1
            last = remaining[0] == 0
        if last:
            join._finish()

    for e in events:
        e._on_done(one_done)
    return join


class Dispatcher:
    """One thread that runs deferred submissions, off driver callback threads and the caller's thread."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        """Forget the thread and queued work (in a forked child, both were the parent's: the work is kept, never
        run nor released here)."""
        if hasattr(self, "_queue"):
            lifecycle.keep_forever(self._queue)
        self._queue: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def post(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` soon on the dispatcher thread."""
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    t = threading.Thread(target=self._loop, name="devicelayer-dispatch", daemon=True)
                    t.start()
                    self._thread = t
        self._queue.put(fn)

    def _loop(self) -> None:
        cpus.use_every_cpu()
        work = self._queue
        while True:
            fn = work.get()
            try:
                fn()
            except Exception:
                log.exception("devicelayer: deferred submission raised")
            fn = None


dispatcher = Dispatcher()

lifecycle.in_forked_child(_reinit_after_fork)
lifecycle.in_forked_child(dispatcher._reset)
lifecycle.in_forked_child(callback_threads.__init__)  # its threads stayed in the parent

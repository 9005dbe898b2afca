"""A host recording's native form: its calls bound once, run in order as one task.

A plan records each run of consecutive host nodes (``Device.record()``); on the
host that recording becomes one ``Stretch``: every launch bound to its NumPy
views, every vendor call to its addresses, when the recording is finished, so a
replay is a loop of plain calls.  Calls of kernels that ignore NumPy's
floating-point errors (the op library's) run under one ``np.errstate`` for the
whole stretch instead of one per call.  A stretch remembers how long it last
ran: a short one may run on the thread that submits it (``HostDevice.run``)
where no call wakes oneDNN's OpenMP team.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from devicelayer.errors import LaunchError

#: a stretch that last ran in less than this may run on the submitting thread (when the device is idle)
INLINE_SECONDS = 0.005


def team_call(fn: Callable[[], object], team: bool) -> Callable[[], object]:
    """``fn`` marked as a call that does (``team``) or does not wake oneDNN's OpenMP team (wrapped where it
    takes no attributes: a bound method, a builtin)."""
    try:
        fn.uses_team = team  # type: ignore[attr-defined]
    except AttributeError:
        inner = fn
        fn = lambda: inner()  # noqa: E731
        fn.uses_team = team  # type: ignore[attr-defined]
    return fn


def uses_team(fn: Callable[[], object], default: bool) -> bool:
    """Whether a bound call wakes an OpenMP team (``team_call``; ``default`` where it does not say)."""
    return bool(getattr(fn, "uses_team", default))


def quietly(fn: Callable[[], object]) -> Callable[[], None]:
    """``fn`` with NumPy's floating-point errors ignored while it runs."""
    def call() -> None:
        with np.errstate(all="ignore"):
            fn()
    return call


class Stretch:
    """Bound calls run in order (``__call__``); ``seconds`` is the shortest run's duration (None before the
    first)."""

    __slots__ = ("labels", "calls", "quiet", "team", "seconds")

    def __init__(self, items: list[tuple[str, Callable[[], object], bool, bool]]) -> None:
        """``items``: (label, call, whether it ignores floating-point errors, whether it wakes an OpenMP team)."""
        quiet = all(q for _, _, q, _ in items)
        self.labels = [label for label, _, _, _ in items]
        # in a stretch that is not quiet throughout, each quiet call sets the error state for itself
        self.calls = [fn if quiet or not q else quietly(fn) for _, fn, q, _ in items]
        self.quiet = quiet
        #: a call wakes oneDNN's team: the stretch stays on the worker, whose team it is (a second team, of
        #: another thread, would spin on the same cores)
        self.team = any(t for _, _, _, t in items)
        self.seconds: float | None = None

    def __len__(self) -> int:
        return len(self.calls)

    @property
    def short(self) -> bool:
        """Whether it may run on the submitting thread: no call wakes a team and a run took less than
        ``INLINE_SECONDS`` (the shortest run, so the answer changes once at most).  A team's calls stay on the
        worker, whose team is bound one thread a CPU: the caller's thread is not bound, and run inline, its team
        shared a CPU with it often enough to make ShuffleNet-v2 2.5x slower on two cores."""
        return not self.team and self.seconds is not None and self.seconds < INLINE_SECONDS

    def __call__(self) -> None:
        t0 = time.perf_counter()
        if self.quiet:
            with np.errstate(all="ignore"):
                self._run()
        else:
            self._run()
        took = time.perf_counter() - t0
        if self.seconds is None or took < self.seconds:
            self.seconds = took

    def _run(self) -> None:
        i = 0
        try:
            for i, fn in enumerate(self.calls):
                fn()
        except BaseException as exc:
            raise LaunchError(f"{self.labels[i]}: {type(exc).__name__}: {exc}") from exc

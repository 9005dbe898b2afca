"""A host recording's native form: its calls bound once, run in order as one task.

A plan records each run of consecutive host nodes (``Device.record()``); on the
host that recording becomes one ``Stretch``: every launch bound to its NumPy
views, every vendor call to its addresses, when the recording is finished, so a
replay is a loop of plain calls.  Calls of kernels that ignore NumPy's
floating-point errors (the op library's) run under one ``np.errstate`` for the
whole stretch instead of one per call; in a stretch that wakes no team, the
calls made to run alone (``omp.alone``) run as they are inside one section of
team size one (``omp.section``) instead of each setting and restoring the size.
Each run of consecutive calls that say what oneDNN primitives they execute
(``runner.mark``) runs as one ``runner.Batch``: one native call instead of one
Python call per layer, where the host runner is built.  A call running several
primitives at once (``LANES``: a small bidirectional LSTM's directions) uses the
worker's team in the team form and the runner's helper threads in the alone
form, armed as each run starts.  A stretch remembers how long it last ran: a
short one may run on the thread that submits it (``HostDevice.run``) where no
call wakes oneDNN's OpenMP team.

A short stretch that does wake the team (a model of a few small layers, one of
them over the size that calls for the team) pays two thread switches a run to
reach the worker, and the team's wake-up: on the 2-core VM more than its
layers' work.  Where every team call can also be built to run alone
(``team_call``'s ``by_itself``), such a stretch tries that: after
``TEAM_RUNS`` runs on the team taking less than ``TRY_ALONE_SECONDS``, it runs
alone ``ALONE_RUNS`` times and for ``TRIAL_SECONDS`` at least (the team's
threads spin for a while after their last call), and keeps the alone form (which then runs on the
submitting thread) where its fastest run beats the team's fastest plus the
device's measured round trip to the worker; else it goes back to the team for
good.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from devicelayer.errors import LaunchError

from . import runner as host_runner

#: a stretch that last ran in less than this may run on the submitting thread (when the device is idle)
INLINE_SECONDS = 0.005
#: a stretch waking the team whose fastest of ``TEAM_RUNS`` runs took less than this is tried alone
TRY_ALONE_SECONDS = 0.002
TEAM_RUNS = 3
ALONE_RUNS = 3
#: the alone form's trial lasts at least this long: the team's threads spin for a while after their last call,
#: and a helper of the host runner sharing a CPU with one of them makes the first alone runs slow
TRIAL_SECONDS = 0.02
#: how long the runner's helpers spin for their call once a run needing them starts: twice the run's shortest
#: duration, within these bounds (a helper asleep takes tens of microseconds to wake on a VM: back-to-back runs
#: find it still spinning)
ARM_LEAST, ARM_SECONDS = 0.0002, 0.001


def team_call(fn: Callable[[], object], team: bool,
              by_itself: Callable[[], Callable[[], object] | None] | None = None) -> Callable[[], object]:
    """``fn`` marked as a call that does (``team``) or does not wake oneDNN's OpenMP team (wrapped where it
    takes no attributes: a bound method, a builtin); ``by_itself``, for a team call: makes the same call run on
    the calling thread alone (None where it cannot)."""
    try:
        fn.uses_team = team  # type: ignore[attr-defined]
    except AttributeError:
        inner = fn
        fn = lambda: inner()  # noqa: E731
        fn.uses_team = team  # type: ignore[attr-defined]
    fn.by_itself = by_itself  # type: ignore[attr-defined]
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

    __slots__ = ("labels", "items", "calls", "quiet", "team", "seconds", "runs", "_items", "_team_form",
                 "_section", "_alone", "_runner", "_call_labels", "_helped", "_trial_start")

    def __init__(self, items: list[tuple[str, Callable[[], object], bool, bool]],
                 section: tuple[Callable[[], int], Callable[[int], None]] | None = None,
                 runner: object | None = None) -> None:
        """``items``: (label, call, whether it ignores floating-point errors, whether it wakes an OpenMP team);
        ``section``: ``omp.section``, with which a stretch waking no team runs its calls made to run alone
        (``omp.alone``) as they are, the team size set to one once for the whole run; ``runner``: the host
        runner (``runner.library``), which runs consecutive marked calls as one ``Batch`` (None: each call from
        Python)."""
        self.quiet = all(q for _, _, q, _ in items)
        self.labels = [label for label, _, _, _ in items]
        self.items = items  # as built (``calls`` is the form that runs)
        self._section = section
        self._runner = runner
        self._call_labels: list[str] = []  # the label of each of ``calls`` ("" for a batch: it names its own)
        self._helped = False  # whether a batch runs a call with the runner's helpers (armed as the run starts)
        self._trial_start = 0.0  # when the alone form's trial began
        self._alone = False  # whether the run is one section of alone calls
        self.calls = self._calls(items)
        #: a call wakes oneDNN's team: the stretch stays on the worker, whose team it is (a second team, of
        #: another thread, would spin on the same cores)
        self.team = any(t for _, _, _, t in items)
        self.seconds: float | None = None
        self.runs = 0  # runs since the form last changed
        #: the items while the alone form may still be tried (None once decided); the team form during the trial
        self._items: list[tuple[str, Callable[[], object], bool, bool]] | None = items if self.team else None
        self._team_form: tuple[list[Callable[[], object]], float, list[str]] | None = None  # (calls, seconds,
        # their labels)

    def _calls(self, items: list[tuple[str, Callable[[], object], bool, bool]]) -> list[Callable[[], object]]:
        self._alone = self._section is not None and not any(team for _, _, _, team in items)
        fns = [getattr(fn, "alone_of", fn) if self._alone else fn for _, fn, _, _ in items]
        calls: list[Callable[[], object]] = []
        labels: list[str] = []
        batch: list[tuple[str, Callable[[], object]]] = []

        def close() -> None:
            if batch:
                lone = len(batch) == 1 and self._fallback(batch)
                # (unlocked: the host device runs its tasks, a stretch's runs among them, one at a time)
                calls.append(batch[0][1] if lone else host_runner.Batch(self._runner, batch, helped=self._alone,
                                                                        locked=False))
                labels.append(batch[0][0] if lone else "")  # (a batch's error names its failing call)
                batch.clear()
        for fn, (label, _, q, _) in zip(fns, items):
            if self._runner is not None and host_runner.native(fn) is not None:
                batch.append((label, fn))
                continue
            close()
            # in a stretch that is not quiet throughout, each quiet call sets the error state for itself
            calls.append(fn if self.quiet or not q else quietly(fn))
            labels.append(label)
        close()
        self._set_labels(calls, labels)
        return calls

    def _set_labels(self, calls: list[Callable[[], object]], labels: list[str]) -> None:
        """Note the labels of the form ``calls`` and whether a batch of it uses the runner's helpers."""
        self._call_labels = labels
        self._helped = any(getattr(fn, "helps", False) for fn in calls)

    @staticmethod
    def _fallback(batch: list[tuple[str, Callable[[], object]]]) -> bool:
        """Whether a lone marked call runs as well from Python: one plain execute (a batch of one only adds its
        table); an alone call, LANES and several entries run faster, or only, through the runner."""
        entries = host_runner.native(batch[0][1]).entries
        return len(entries) == 1 and entries[0][4] == host_runner.EXECUTE

    @property
    def deciding(self) -> bool:
        """Whether the stretch may still change form (``decide``)."""
        return self._items is not None

    def decide(self, round_trip: Callable[[], float]) -> None:
        """Between runs (none in flight): try the alone form of a short team stretch, or settle on the faster
        form (see the module's docstring); ``round_trip()``: the device's seconds to reach its worker and back."""
        items = self._items
        if items is None or self.runs < (TEAM_RUNS if self._team_form is None else ALONE_RUNS):
            return
        if self._team_form is not None and time.perf_counter() - self._trial_start < TRIAL_SECONDS:
            return
        if self._team_form is None:  # the team form has run: try alone, where it is short and can be
            if self.seconds is None or self.seconds >= TRY_ALONE_SECONDS:
                self._items = None
                return
            alone = []
            for label, fn, quiet, team in items:
                made = getattr(fn, "by_itself", None) if team else fn
                if team and made is not None:
                    try:
                        made = made()
                    except Exception:  # (a layer oneDNN will not build alone: the team form stays)
                        made = None
                if made is None:
                    self._items = None
                    return
                alone.append((label, made, quiet, False))
            self._team_form = (self.calls, self.seconds, self._call_labels)
            self._trial_start = time.perf_counter()
            self.calls, self.team, self.seconds, self.runs = self._calls(alone), False, None, 0
            return
        team_calls, team_seconds, team_labels = self._team_form
        self._items = self._team_form = None
        if self.seconds is None or self.seconds > team_seconds + round_trip():
            self.calls, self.team, self.seconds, self.runs = team_calls, True, team_seconds, 0
            self._set_labels(team_calls, team_labels)
            self._alone = False

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
        self.runs += 1
        if self.seconds is None or took < self.seconds:
            self.seconds = took

    def _run(self) -> None:
        i = 0
        calls, section = self.calls, self._section if self._alone else None
        if self._helped:  # (the helpers spin from now, ready when their call comes, and for the next run's)
            self._runner.runner_arm(int(min(max(2 * (self.seconds or ARM_SECONDS), ARM_LEAST), ARM_SECONDS) * 1e9))
        size = section[0]() if section is not None else 0
        try:
            for i, fn in enumerate(calls):
                fn()
        except BaseException as exc:
            label = self._call_labels[i]
            raise LaunchError(f"{label}: {type(exc).__name__}: {exc}" if label else str(exc)) from exc
        finally:
            if section is not None:
                section[1](size)

"""The host runner: consecutive oneDNN calls of a recording run as one native call (``runner.c``).

A bound oneDNN call costs 0.6-1 us of Python and ctypes around oneDNN's own work: a small model's 30 layers
spend more there than onnxruntime's whole run takes for some of them.  So a bound call says what it executes
(``mark``: its primitives, the stream, their argument arrays, and the locks of the layers whose scratch memory
they use) and a stretch hands each run of such calls to ``Batch``, which executes them through ``runner.c`` in
one ctypes call.  The runner also runs independent calls at once on the calling thread's OpenMP team (``LANES``:
the two directions of a small bidirectional LSTM), which a Python callback per thread could not do for its cost
(about 20 us a region on the 2-core VM, more than one direction's work).

``runner.c`` is compiled once by the system's C compiler (``$CC``, else ``cc``, ``gcc`` or ``clang``) into the
disk cache, under a name made of the source's and the compiler's fingerprint, and loaded from there by later
processes.  Without a compiler, or with ``DEVICELAYER_HOST_RUNNER=0``, every call runs from Python as before
(``unavailable`` says why).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

from devicelayer import diskcache

from .omp import _OFF, _openmp

SOURCE = Path(__file__).with_name("runner.c")
EXECUTE, ALONE, LANES, HELPED, GUARD_NAN, GUARD_NAN_INF, COPY = 0, 1, 2, 3, 4, 5, 6  # runner.c's call kinds
GUARDED = -2  # runner_run's status where a guard stopped the run
MAX_LANES = 64
_COMPILERS = ("cc", "gcc", "clang")
_FLAGS = ("-O2", "-shared", "-fPIC", "-std=c99")


class RunnerCall(ctypes.Structure):
    """runner.c's ``runner_call``."""

    _fields_ = [("primitive", ctypes.c_void_p), ("stream", ctypes.c_void_p), ("args", ctypes.c_void_p),
                ("nargs", ctypes.c_int32), ("kind", ctypes.c_int32)]


#: one call a runner executes: (primitive, stream, address of its dnnl_exec_arg_t array, nargs, kind); a guard's
#: is (address of the float32 values, their count, 0, the guarded entries that follow, kind); a copy's
#: (destination, source, bytes, 0, COPY)
Entry = tuple[int, int, int, int, int]


class Native(NamedTuple):
    """What a marked call executes (``mark``)."""

    entries: tuple[Entry, ...]
    locks: tuple[threading.Lock, ...]
    keep: Any
    #: for a guarded call: what computes it where its guard finds NaN (or infinity) in the input
    fallback: Callable[[], object] | None = None


_lock = threading.Lock()
_state: dict[str, Any] = {}  # "lib": the loaded runner or None; "why": why there is none


def wanted() -> bool:
    """Whether the runner may be used (``DEVICELAYER_HOST_RUNNER`` is not 0)."""
    return os.environ.get("DEVICELAYER_HOST_RUNNER", "").strip().lower() not in _OFF


def compiler() -> str | None:
    """The C compiler's path: ``$CC`` where set (its first word), else the first of cc, gcc, clang found."""
    own = os.environ.get("CC", "").split()
    if own:
        return shutil.which(own[0])
    return next((path for path in map(shutil.which, _COMPILERS) if path), None)


def _fingerprint(cc: str) -> str:
    """What the built library depends on: the source, the compiler (path, size, modification time), the flags."""
    st = os.stat(cc)
    h = hashlib.sha256(SOURCE.read_bytes())
    h.update(f"{os.path.realpath(cc)}:{st.st_size}:{st.st_mtime_ns}:{' '.join(_FLAGS)}".encode())
    return h.hexdigest()[:20]


def build(cc: str, folder: Path) -> Path:
    """The runner compiled by ``cc`` into ``folder`` (reused where a library of the same fingerprint is there);
    RuntimeError where the compiler fails."""
    target = Path(folder) / f"runner-{_fingerprint(cc)}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        done = subprocess.run([cc, *_FLAGS, "-o", tmp, str(SOURCE)], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{cc} failed: {(done.stderr or done.stdout).strip()[:500]}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def _load(lib: ctypes.CDLL) -> ctypes.CDLL:
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler (set CC, or install gcc)")
    try:
        path = build(cc, diskcache.cache_dir() / "host-runner")
    except OSError:  # (a cache folder that cannot be written: a private temporary one)
        path = build(cc, Path(tempfile.mkdtemp(prefix="devicelayer-runner-")))
    try:
        runner = ctypes.CDLL(str(path))
    except OSError:  # (a damaged file in the cache: built again)
        path.unlink(missing_ok=True)
        runner = ctypes.CDLL(str(build(cc, path.parent)))
    runner.runner_init.argtypes, runner.runner_init.restype = [ctypes.c_void_p], None
    runner.runner_run.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    runner.runner_run.restype = ctypes.c_int
    runner.runner_arm.argtypes, runner.runner_arm.restype = [ctypes.c_longlong], None
    omp = _openmp(lib)
    names = ("GOMP_parallel", "omp_get_thread_num", "omp_get_num_threads", "omp_get_max_threads",
             "omp_set_num_threads")
    fns = [lib.dnnl_primitive_execute, *((omp[n] for n in names) if omp is not None else [None] * len(names))]
    table = (ctypes.c_void_p * len(fns))(*[ctypes.cast(f, ctypes.c_void_p).value if f is not None else None
                                           for f in fns])
    runner.runner_init(table)
    return runner


def library(lib: ctypes.CDLL | None) -> ctypes.CDLL | None:
    """The runner for oneDNN ``lib`` (built and loaded once); None without oneDNN, without a compiler, where
    the build fails or with ``DEVICELAYER_HOST_RUNNER=0`` (``unavailable`` says why)."""
    if lib is None or not wanted():
        return None
    if "lib" not in _state:
        with _lock:
            if "lib" not in _state:
                try:
                    _state["lib"] = _load(lib)
                except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
                    _state["lib"], _state["why"] = None, str(exc)
    return _state["lib"]


def available() -> bool:
    """Whether the runner is there for the process's oneDNN (built, or loaded from the disk cache, on first ask):
    small layers then cost less through oneDNN than through NumPy."""
    from .dnnl import library as onednn  # (dnnl imports this module)

    return library(onednn()) is not None


def unavailable() -> str | None:
    """Why the runner is not used (None where it is, or has not been asked for yet)."""
    if not wanted():
        return "DEVICELAYER_HOST_RUNNER=0"
    return _state.get("why")


def mark(fn: Callable[[], object], entries: Sequence[Entry], locks: Sequence[threading.Lock],
         keep: Any = None, fallback: Callable[[], object] | None = None) -> Callable[[], object]:
    """``fn`` noted as executing ``entries`` (under ``locks``), for ``Batch``; ``keep``: what the entries'
    argument arrays need alive, held with the call; ``fallback``: a guarded call's other form (``guard``).
    Returns ``fn``."""
    fn.native = Native(tuple(entries), tuple(locks), keep, fallback)  # type: ignore[attr-defined]
    return fn


def native(fn: Callable[[], object]) -> Native | None:
    """What ``mark`` noted of ``fn``; None for a call that runs Python."""
    return getattr(fn, "native", None)


def as_alone(found: Native | None) -> Native | None:
    """A noted call's entries run alone (the thread's team size one around each): ``omp.alone``'s form."""
    if found is None:
        return None
    return found._replace(entries=tuple((p, s, a, n, ALONE if k == EXECUTE else k) for p, s, a, n, k in found.entries))


def guard(fn: Callable[[], object], call: Callable[[], object], x: Any, infinity: bool,
          fallback: Callable[[], object]) -> Callable[[], object]:
    """``fn``, the Python form of a guarded call, marked with the runner's: marked ``call`` run where the float32
    array ``x`` holds no NaN (with ``infinity``: no NaN and no +infinity), else ``fallback``; ``fn`` unmarked
    where ``call`` is not marked."""
    found = native(call)
    if found is None:
        return fn
    check = (x.ctypes.data, x.size, 0, len(found.entries), GUARD_NAN_INF if infinity else GUARD_NAN)
    return mark(fn, (check, *found.entries), found.locks, (found.keep, x), fallback)


class Batch:
    """Calls noted by ``mark`` run in order as one runner call; a failure raises RuntimeError naming the call's
    label.  ``helped``: LANES calls run as HELPED (by the runner's helpers, for a thread whose OpenMP team is
    not awake: a stretch whose calls all run alone); ``helps`` says whether the batch has such a call.
    ``locked``: each run holds the locks of the layers whose scratch memory its calls use (a stretch's batch runs
    without: its host device runs one task at a time, and every run of a device's layers is such a task; the
    locks cost 1.2 us a run for 18 layers on the VM)."""

    __slots__ = ("labels", "fns", "helps", "_table", "_owner", "_starts", "_locks", "_failed", "_run", "_n")

    def __init__(self, runner: ctypes.CDLL, items: Sequence[tuple[str, Callable[[], object]]],
                 helped: bool = False, locked: bool = True) -> None:
        entries: list[Entry] = []
        self._owner: list[int] = []  # the call of each entry
        self._starts: list[int] = []  # each call's first entry
        locks: dict[int, threading.Lock] = {}
        self.labels = [label for label, _ in items]
        self.fns = [fn for _, fn in items]  # (they hold the argument arrays and memories the entries point at)
        for j, (label, fn) in enumerate(items):
            found = native(fn)
            if found is None:
                raise ValueError(f"{label} has no native form")
            self._starts.append(len(entries))
            entries.extend(found.entries)
            self._owner.extend([j] * len(found.entries))
            for lock in found.locks:
                locks.setdefault(id(lock), lock)
        if helped:
            entries = [(p, s, a, n, HELPED if k == LANES else k) for p, s, a, n, k in entries]
        self.helps = any(e[4] == HELPED for e in entries)
        self._table = (RunnerCall * len(entries))(*[RunnerCall(*e) for e in entries])
        # (one order for every batch: no two wait on each other)
        self._locks = [locks[k] for k in sorted(locks)] if locked else []
        self._failed = ctypes.c_int(-1)
        self._run = runner.runner_run
        self._n = len(entries)

    def __len__(self) -> int:
        return len(self.fns)

    def __call__(self) -> None:
        locks = self._locks
        for lock in locks:
            lock.acquire()
        try:
            status = self._run(self._table, self._n, ctypes.byref(self._failed))
            while status == GUARDED:  # (a guarded call's other form, then on from the next call)
                j = self._owner[self._failed.value]
                self.fns[j].native.fallback()  # type: ignore[attr-defined]
                if j + 1 == len(self.fns):
                    status = 0
                    break
                at = self._starts[j + 1]
                status = self._run(ctypes.byref(self._table, at * ctypes.sizeof(RunnerCall)), self._n - at,
                                   ctypes.byref(self._failed))
                if status and self._failed.value >= 0:
                    self._failed.value += at
        finally:
            for lock in locks:
                lock.release()
        if status:
            i = self._failed.value
            label = self.labels[self._owner[i]] if 0 <= i < self._n else self.labels[0]
            raise RuntimeError(f"{label}: oneDNN status {status}")

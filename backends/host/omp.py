"""The OpenMP binding oneDNN's threads run under on the host.

After an idle pause the scheduler tends to wake an OpenMP thread on the CPU of
the thread that woke it, and the two then share that CPU for the whole run: on
a 2-CPU machine a model ran at one-CPU speed in about half the calls. Bound
threads cannot be stacked that way. So where devicelayer is the one to load the
OpenMP runtime and nobody chose a binding, it loads the runtime with
``OMP_PROC_BIND=true``, as onnxruntime binds its own pool: the runtime then puts
each thread of every team it starts on its own CPU, threads it starts again
later included. (A pin applied once to the threads of a team does not last:
libgomp ends the surplus threads when a smaller team starts, and the threads it
starts later inherit their master's CPU set.) The variable is set only for the
moment of loading, so child processes do not inherit it, and host_dnnl gives
the loading thread its CPUs back.

Nothing is bound with ``DEVICELAYER_PIN_THREADS=0``; a binding the user set
(``OMP_PROC_BIND``, ``OMP_PLACES``, ``GOMP_CPU_AFFINITY``, ``KMP_AFFINITY``) is
the runtime's to follow; a runtime another library loaded first keeps its own.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
from typing import Any, Callable, Iterable, Iterator

_OFF = ("0", "off", "no", "false")
USER_BINDING = ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY")
_RUNTIMES = ("libgomp.so", "libiomp5.so", "libomp.so")  # file names start so (libgomp.so.1.0.0, ...)
_RUNTIME_OMP = 2  # dnnl_version_t.cpu_runtime of an OpenMP build (DNNL_RUNTIME_OMP)
_BIND_NAMES = {0: "unbound", 1: "bound (true)", 2: "bound (primary)", 3: "bound (close)", 4: "bound (spread)"}
_Task = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_loaded_with: dict[str, str] = {}  # what ``loading`` did: "why" -> the reason


def _declined() -> str | None:
    """Why the environment leaves devicelayer no binding to choose; None where it does."""
    if os.environ.get("DEVICELAYER_PIN_THREADS", "").strip().lower() in _OFF:
        return "DEVICELAYER_PIN_THREADS=0"
    user = next((name for name in USER_BINDING if os.environ.get(name, "").strip()), None)
    return None if user is None else f"the user's {user}"


def wanted() -> bool:
    """Whether devicelayer should bind (the environment leaves the choice to it)."""
    return _declined() is None


def runtime_loaded() -> bool:
    """Whether the OpenMP runtime oneDNN links is already mapped into this process."""
    try:
        with open("/proc/self/maps") as f:
            return runtime_in(f)
    except OSError:
        return False


def runtime_in(maps: Iterable[str]) -> bool:
    """Whether these lines of /proc/PID/maps map a shared OpenMP runtime (a copy a wheel bundles under a name of
    its own, such as PyTorch's libgomp-<hash>.so.1, is another runtime: it does not count)."""
    return any(line.rstrip().rsplit("/", 1)[-1].startswith(_RUNTIMES) for line in maps if "/" in line)


@contextlib.contextmanager
def loading(private: bool = False) -> Iterator[None]:
    """Around loading oneDNN: ``OMP_PROC_BIND=true`` in the environment where devicelayer binds (see above);
    ``private``: oneDNN is loaded with an OpenMP runtime of its own (``omp_copy``), which no other library has
    started before."""
    why = _declined() or ("the OpenMP runtime was loaded before devicelayer"
                          if not private and runtime_loaded() else None)
    _loaded_with["why"] = why or "devicelayer"
    _loaded_with["runtime"] = "own" if private else "shared"
    if why is not None:
        yield
        return
    os.environ["OMP_PROC_BIND"] = "true"
    try:
        yield
    finally:
        os.environ.pop("OMP_PROC_BIND", None)


@functools.cache
def _openmp(lib: ctypes.CDLL) -> dict[str, Any] | None:
    """The OpenMP entry points oneDNN links; None where oneDNN does not run on OpenMP."""
    if lib.dnnl_version().contents.cpu_runtime != _RUNTIME_OMP:
        return None
    try:
        fns = {name: getattr(lib, name) for name in ("GOMP_parallel", "omp_get_thread_num", "omp_get_num_threads",
                                                     "omp_get_max_threads", "omp_get_proc_bind",
                                                     "omp_set_num_threads", "omp_get_num_procs")}
    except AttributeError:
        return None
    fns["GOMP_parallel"].argtypes = [_Task, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
    fns["GOMP_parallel"].restype = None
    for name in ("omp_get_thread_num", "omp_get_num_threads", "omp_get_max_threads", "omp_get_proc_bind",
                 "omp_get_num_procs"):
        fns[name].argtypes, fns[name].restype = [], ctypes.c_int
    fns["omp_set_num_threads"].argtypes, fns["omp_set_num_threads"].restype = [ctypes.c_int], None
    return fns


def alone(lib: ctypes.CDLL | None, fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` called with the calling thread's OpenMP team size set to one (its own size back afterwards): oneDNN
    then runs the work on that thread without waking a team, as it sizes its work by the team it sees (a
    primitive built this way keeps to one thread).  ``fn`` itself without oneDNN on OpenMP."""
    around = section(lib)
    if around is None:
        return fn
    enter, leave = around

    def call() -> Any:
        size = enter()
        try:
            return fn()
        finally:
            leave(size)
    call.alone_of = fn  # type: ignore[attr-defined]  # (a run of such calls sets the size once: ``section``)
    from .runner import as_alone, native  # (the runner's form of the same call: each entry alone)
    found = as_alone(native(fn))
    if found is not None:
        call.native = found  # type: ignore[attr-defined]
    return call


def team_size(lib: ctypes.CDLL | None) -> int:
    """The size of a team of the default size (``OMP_NUM_THREADS``'s first value where set, else the processors
    the runtime counts for the process), whichever thread asks (a thread's own size may be set to one for a
    while: ``alone``); the CPUs of the process without oneDNN on OpenMP."""
    first = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if first.isdigit() and int(first) > 0:
        return int(first)
    omp = None if lib is None else _openmp(lib)
    return omp["omp_get_num_procs"]() if omp is not None else len(os.sched_getaffinity(0))


def section(lib: ctypes.CDLL | None) -> tuple[Callable[[], int], Callable[[int], None]] | None:
    """(enter, leave) around a run of ``alone`` calls, made as their ``alone_of`` in one go: ``enter()`` sets the
    calling thread's team size to one and returns its size, ``leave(size)`` sets it back; None without oneDNN on
    OpenMP."""
    omp = None if lib is None else _openmp(lib)
    if omp is None:
        return None
    get, put = omp["omp_get_max_threads"], omp["omp_set_num_threads"]

    def enter() -> int:
        size = get()
        put(1)
        return size
    return enter, put


def describe(lib: ctypes.CDLL | None) -> str | None:
    """oneDNN's threads in words: how many, and bound or not and by whom (None without oneDNN on OpenMP)."""
    omp = None if lib is None else _openmp(lib)
    if omp is None:
        return None
    bind = omp["omp_get_proc_bind"]()
    how = _BIND_NAMES.get(bind, f"bound ({bind})")
    who = _loaded_with.get("why", "")
    if bind and who == "devicelayer":
        how += ", one CPU per thread"
    elif who and who != "devicelayer":
        how += f" ({who})"
    own = ", a runtime of their own" if _loaded_with.get("runtime") == "own" else ""
    return f"{omp['omp_get_max_threads']()} OpenMP threads{own}, {how}"


def in_team(lib: ctypes.CDLL, fn: Callable[[int, int], Any], threads: int = 0) -> list[Any] | None:
    """``fn(i, n)`` on each thread i of a team of n that the calling thread starts (``threads``; 0: the default
    size), as one parallel region; the results by thread. None without oneDNN on OpenMP."""
    omp = None if lib is None else _openmp(lib)
    if omp is None:
        return None
    results: dict[int, Any] = {}
    errors: list[BaseException] = []

    def task(_: Any) -> None:
        i = omp["omp_get_thread_num"]()
        try:
            results[i] = fn(i, omp["omp_get_num_threads"]())
        except BaseException as exc:  # an exception must not cross the C frames
            errors.append(exc)

    omp["GOMP_parallel"](_Task(task), None, threads, 0)
    if errors:
        raise errors[0]
    return [results[i] for i in sorted(results)]


def team_affinity(lib: ctypes.CDLL, threads: int = 0) -> list[frozenset[int]] | None:
    """The CPUs each thread of a team the calling thread starts may run on; None without oneDNN on OpenMP."""
    return in_team(lib, lambda i, n: frozenset(os.sched_getaffinity(0)), threads)

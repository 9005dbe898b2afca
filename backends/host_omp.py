"""One CPU for each thread of the host worker's OpenMP team (the threads oneDNN runs on).

After an idle pause the scheduler tends to wake an OpenMP thread on the CPU of
the thread that woke it, and the two then share that CPU for the whole run:
on a 2-CPU machine a model ran at one-CPU speed in about half the calls.
Pinned threads cannot be stacked that way. The worker pins its team once,
before its first oneDNN call, the way libgomp does under OMP_PROC_BIND=true
and onnxruntime does for its own pool: thread i of n gets the i-th CPU, one
CPU per core first, then the cores' other hardware threads.

Nothing is pinned with ``DEVICELAYER_PIN_THREADS=0``, where the user set an
OpenMP binding (``OMP_PROC_BIND``, ``OMP_PLACES``, ``GOMP_CPU_AFFINITY``,
``KMP_AFFINITY``: the runtime then binds), where oneDNN does not run on
OpenMP, or where the team has more threads than the process has CPUs.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, Callable

_OFF = ("0", "off", "no", "false")
_USER_BINDING = ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY")
_RUNTIME_OMP = 2  # dnnl_version_t.cpu_runtime of an OpenMP build (DNNL_RUNTIME_OMP)
_Task = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def wanted() -> bool:
    """Whether the team should be pinned (the environment leaves it to devicelayer)."""
    if os.environ.get("DEVICELAYER_PIN_THREADS", "").strip().lower() in _OFF:
        return False
    return not any(os.environ.get(name, "").strip() for name in _USER_BINDING)


def places(cpus: set[int] | frozenset[int], siblings: Callable[[int], list[int]] | None = None) -> list[int]:
    """``cpus`` in the order threads take them: the first hardware thread of each core, then the second, ...
    (``siblings(cpu)``: the hardware threads of cpu's core; the kernel's topology by default)."""
    rank: dict[int, tuple[int, int]] = {}
    for cpu in cpus:
        core = sorted(c for c in (siblings or _siblings)(cpu) if c in cpus or c == cpu)
        rank[cpu] = (core.index(cpu) if cpu in core else 0, cpu)
    return sorted(cpus, key=rank.__getitem__)


def _siblings(cpu: int) -> list[int]:
    """The hardware threads sharing cpu's core, as the kernel lists them."""
    try:
        with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
            return _cpu_list(f.read())
    except (OSError, ValueError):
        return [cpu]


def _cpu_list(text: str) -> list[int]:
    """A kernel CPU list ("0-3,8,10-11") as numbers."""
    out: list[int] = []
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def _openmp(lib: ctypes.CDLL) -> tuple[Any, Any, Any] | None:
    """libgomp's entry points as oneDNN links them; None where oneDNN does not run on OpenMP."""
    if lib.dnnl_version().contents.cpu_runtime != _RUNTIME_OMP:
        return None
    try:
        parallel, thread, threads = lib.GOMP_parallel, lib.omp_get_thread_num, lib.omp_get_num_threads
    except AttributeError:
        return None
    parallel.argtypes, parallel.restype = [_Task, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint], None
    thread.argtypes, thread.restype = [], ctypes.c_int
    threads.argtypes, threads.restype = [], ctypes.c_int
    return parallel, thread, threads


def _in_team(lib: ctypes.CDLL, fn: Callable[[int, int], Any]) -> list[Any] | None:
    """``fn(i, n)`` on each thread i of the calling thread's team of n, as one parallel region; the results by
    thread (an exception raised on a thread is re-raised here). None without OpenMP."""
    omp = _openmp(lib)
    if omp is None:
        return None
    parallel, thread, threads = omp
    results: dict[int, Any] = {}
    errors: list[BaseException] = []

    def task(_: Any) -> None:
        i = thread()
        try:
            results[i] = fn(i, threads())
        except BaseException as exc:  # an exception must not cross the C frames
            errors.append(exc)

    parallel(_Task(task), None, 0, 0)
    if errors:
        raise errors[0]
    return [results[i] for i in sorted(results)]


def team_affinity(lib: ctypes.CDLL) -> list[frozenset[int]] | None:
    """The CPUs each thread of the calling thread's OpenMP team may run on; None without OpenMP."""
    return _in_team(lib, lambda i, n: frozenset(os.sched_getaffinity(0)))


def pin_team(lib: ctypes.CDLL) -> list[int] | None:
    """Pin the calling thread and its OpenMP team, thread i to the i-th of ``places``; the CPUs by thread, or
    None where nothing was pinned (see the module's docstring). Call it on the thread that runs oneDNN."""
    if not wanted() or not hasattr(os, "sched_setaffinity"):
        return None
    cpus = os.sched_getaffinity(0)
    order = places(cpus)
    size = _in_team(lib, lambda i, n: n)
    if not size or size[0] < 2 or size[0] > len(order):
        return None

    def pin(i: int, n: int) -> int:
        os.sched_setaffinity(0, {order[i]})
        return order[i]

    try:
        return _in_team(lib, pin)
    except OSError:  # a CPU left the process's set meanwhile: all or none
        try:
            _in_team(lib, lambda i, n: os.sched_setaffinity(0, cpus))
        except OSError:
            pass
        return None

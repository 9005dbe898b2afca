"""The CPUs this process may use, and a way for a thread devicelayer starts to take all of them.

A thread inherits its creator's CPU set. The host worker is bound to one CPU
once it starts a bound OpenMP team (backends/host/omp.py), so a helper started
from it would be confined there.
"""

from __future__ import annotations

import os

#: the CPUs the process may use, read when devicelayer is imported (None where the OS does not say)
PROCESS_CPUS: frozenset[int] | None = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def count() -> int:
    """How many CPUs the process may use."""
    return max(1, len(PROCESS_CPUS) if PROCESS_CPUS is not None else os.cpu_count() or 1)


def use_every_cpu() -> None:
    """Let the calling thread run on every CPU of the process, whichever thread started it."""
    if PROCESS_CPUS is not None and os.sched_getaffinity(0) != PROCESS_CPUS:
        try:
            os.sched_setaffinity(0, PROCESS_CPUS)
        except OSError:
            pass  # the process's CPUs changed since: the thread keeps the ones it has

"""The machine's memory as the kernel reports it (``/proc/meminfo``; ``sysconf`` elsewhere)."""

from __future__ import annotations

import os


def meminfo(field: str) -> int:
    """Bytes of ``/proc/meminfo``'s ``field`` ("MemTotal", "MemAvailable"), from ``sysconf`` where it is missing."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    if field == "MemTotal":
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def available() -> int:
    """Memory the machine can give a process now without swapping."""
    return meminfo("MemAvailable")

"""The machine's memory: what the kernel reports (``/proc/meminfo``; ``sysconf`` elsewhere), and large host blocks
asked to be backed by huge pages (``block``)."""

from __future__ import annotations

import os

import numpy as np


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


#: blocks of at least this many bytes are asked to be backed by transparent huge pages (``block``)
HUGE_PAGE_BYTES = 2 << 20


def huge_pages_wanted() -> bool:
    """Whether large blocks ask for transparent huge pages (``DEVICELAYER_HUGE_PAGES=0`` turns it off)."""
    return os.environ.get("DEVICELAYER_HUGE_PAGES", "1").strip().lower() not in ("0", "off", "false", "no")


def aligned_empty(nbytes: int) -> np.ndarray:
    """``nbytes`` of uninitialised NumPy memory (uint8) aligned to 64 bytes: from the C library's heap, which hands
    a freed block out again (for buffers that come and go)."""
    raw = np.empty(nbytes + 64, np.uint8)
    start = (-raw.ctypes.data) % 64
    return raw[start:start + nbytes]


def block(nbytes: int, populate: bool = False) -> np.ndarray:
    """``nbytes`` of uninitialised private memory (uint8), aligned to 64 bytes at least, for data kept a long time
    and read often (a model's weights): a large block on huge pages (``huge_block``), a smaller one NumPy's."""
    found = huge_block(nbytes, populate)
    return found if found is not None else aligned_empty(nbytes)


def huge_block(nbytes: int, populate: bool = False) -> np.ndarray | None:
    """``nbytes`` (``HUGE_PAGE_BYTES`` or more) of uninitialised private memory (uint8) as an anonymous mapping of
    its own, aligned to ``HUGE_PAGE_BYTES`` and advised ``MADV_HUGEPAGE``; None for a smaller block, where
    ``DEVICELAYER_HUGE_PAGES=0``, or where the system has no such calls.

    Where the kernel's transparent huge pages are "madvise" (a common default), its pages are 2 MiB ones, so
    weights streamed every run take a TLB entry per 2 MiB instead of per 4 KiB; its last partial 2 MiB (and the
    unused span after it) stays on ordinary pages, so its memory is its size rather than rounded up.  Such a
    mapping is made and faulted in once: not for buffers that come and go.  ``populate``: the pages made at once
    (a fault per huge page now, not one per page as a first copy touches them)."""
    if nbytes < HUGE_PAGE_BYTES or not huge_pages_wanted():
        return None
    import mmap

    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is None:
        return None
    span = nbytes + HUGE_PAGE_BYTES
    try:
        area = mmap.mmap(-1, span, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except (AttributeError, OSError, ValueError):
        return None
    whole = np.frombuffer(area, np.uint8)
    start = (-whole.ctypes.data) % HUGE_PAGE_BYTES
    tail = start + nbytes // HUGE_PAGE_BYTES * HUGE_PAGE_BYTES
    try:
        area.madvise(advice, start, tail - start)
        no_huge = getattr(mmap, "MADV_NOHUGEPAGE", None)
        if no_huge is not None and tail < span:
            area.madvise(no_huge, tail, span - tail)
    except (OSError, ValueError):
        pass  # (a kernel without transparent huge pages: ordinary pages)
    out = whole[start:start + nbytes]
    if populate:
        out[::mmap.PAGESIZE] = 0
    return out

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


def block(nbytes: int, populate: bool = False) -> np.ndarray:
    """``nbytes`` of uninitialised private memory (uint8), aligned to 64 bytes at least, for data kept a long time
    and read often (a model's weights): each large block is a mapping of its own, made and faulted in once.

    A block of ``HUGE_PAGE_BYTES`` or more is its own anonymous mapping, aligned to that size and advised
    ``MADV_HUGEPAGE``: where the kernel's transparent huge pages are "madvise" (a common default), its pages
    are 2 MiB ones, so weights streamed every run take a TLB entry per 2 MiB instead of per 4 KiB.  ``populate``: the pages made at once (one call, not a fault per page as a first copy
    touches them).  Smaller blocks, and systems without these calls, take NumPy's memory."""
    if nbytes >= HUGE_PAGE_BYTES and huge_pages_wanted():
        found = _mapped(nbytes, populate)
        if found is not None:
            return found
    raw = np.empty(nbytes + 64, np.uint8)
    start = (-raw.ctypes.data) % 64
    return raw[start:start + nbytes]


def _mapped(nbytes: int, populate: bool) -> np.ndarray | None:
    """An anonymous mapping of ``nbytes`` starting at a ``HUGE_PAGE_BYTES`` boundary, advised for huge pages;
    None where the system has no such calls."""
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
    # huge pages for the whole 2 MiB pieces of the block; its last partial piece (and the unused span after it)
    # on ordinary pages, so the block's memory stays its size rather than rounding up to 2 MiB
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
        out[::mmap.PAGESIZE] = 0  # one fault per huge page where the kernel gives them (before the first copy)
    return out

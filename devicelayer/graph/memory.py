"""Memory planning: offsets of every tensor of a device in one arena, reusing memory across lifetimes.

Greedy by size (as TFLite's planner): tensors sorted largest first, each put
at the lowest aligned offset where it overlaps no already-placed tensor whose
lifetime it shares.

Where a device's launches run slower on views of one allocation
(``MemoryPool.whole_buffers``), ``plan_buffers`` gives each tensor a whole
buffer of its own instead, a buffer shared by tensors whose lifetimes do not
meet: in order of first use, each takes the smallest free buffer that holds
it, else the largest free one (grown to fit), else a new one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Slot:
    """A tensor to place: bytes and the steps [first, last] during which it must hold its data."""

    key: object
    nbytes: int
    first: int
    last: int


@dataclass
class ArenaPlan:
    """Offsets chosen for one device, with the figures ``memory_report`` shows."""

    offsets: dict[object, int]
    peak: int
    lower_bound: int
    no_reuse: int
    #: ``plan_buffers``: the buffer index of each key (its offset is 0), and each buffer's size
    buffers: dict[object, int] | None = None
    buffer_sizes: list[int] | None = None


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


def plan_arena(slots: list[Slot], alignment: int = 256) -> ArenaPlan:
    """Choose offsets for ``slots``; ``peak`` is the arena size needed."""
    sizes = {s.key: _align(max(s.nbytes, 1), alignment) for s in slots}
    order = sorted(slots, key=lambda s: (-sizes[s.key], s.first, str(s.key)))
    placed: list[tuple[int, int, Slot]] = []  # (offset, end, slot)
    offsets: dict[object, int] = {}
    for s in order:
        size = sizes[s.key]
        busy = sorted((o, e) for o, e, t in placed if t.first <= s.last and s.first <= t.last)
        best, best_gap, cursor = None, None, 0
        for o, e in busy:
            if o - cursor >= size:
                gap = o - cursor
                if best_gap is None or gap < best_gap:
                    best, best_gap = cursor, gap
            cursor = max(cursor, e)
        if best is None:
            best = cursor
        offsets[s.key] = best
        placed.append((best, best + size, s))
    peak = max((o + sizes[s.key] for o, _, s in placed), default=0)
    return ArenaPlan(offsets, peak, _lower_bound(slots, sizes), sum(sizes.values()))


def plan_buffers(slots: list[Slot], alignment: int = 256) -> ArenaPlan:
    """Whole buffers for ``slots`` (see above); ``peak`` is their total size."""
    sizes = {s.key: _align(max(s.nbytes, 1), alignment) for s in slots}
    order = sorted(slots, key=lambda s: (s.first, -sizes[s.key], str(s.key)))
    buffer_sizes: list[int] = []
    busy_until: list[int] = []  # the last step of the latest slot in each buffer
    buffers: dict[object, int] = {}
    for s in order:
        size = sizes[s.key]
        free = [b for b in range(len(buffer_sizes)) if busy_until[b] < s.first]
        fits = [b for b in free if buffer_sizes[b] >= size]
        if fits:
            b = min(fits, key=lambda b: (buffer_sizes[b], b))
        elif free:
            b = max(free, key=lambda b: (buffer_sizes[b], -b))
            buffer_sizes[b] = size
        else:
            b = len(buffer_sizes)
            buffer_sizes.append(size)
            busy_until.append(s.last)
        busy_until[b] = s.last
        buffers[s.key] = b
    return ArenaPlan({key: 0 for key in buffers}, sum(buffer_sizes), _lower_bound(slots, sizes), sum(sizes.values()),
                     buffers, buffer_sizes)


def _lower_bound(slots: list[Slot], sizes: dict[object, int]) -> int:
    """The most bytes live at one step: no plan of ``slots`` takes less."""
    steps = sorted({s.first for s in slots} | {s.last for s in slots})
    return max((sum(sizes[s.key] for s in slots if s.first <= t <= s.last) for t in steps), default=0)


def nbytes(t: Any) -> int:
    """Bytes a value of TensorType ``t`` takes in memory (at least one element, so empty values have an address)."""
    return max(t.size * t.dtype.itemsize, t.dtype.itemsize)

"""Memory planning: offsets of every tensor of a device in one arena, reusing memory across lifetimes.

Greedy by size (as TFLite's planner): tensors sorted largest first, each put
at the lowest aligned offset where it overlaps no already-placed tensor whose
lifetime it shares.
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
    steps = sorted({s.first for s in slots} | {s.last for s in slots})
    lower = max((sum(sizes[s.key] for s in slots if s.first <= t <= s.last) for t in steps), default=0)
    return ArenaPlan(offsets, peak, lower, sum(sizes.values()))


def nbytes(t: Any) -> int:
    """Bytes a value of TensorType ``t`` takes in memory (at least one element, so empty values have an address)."""
    return max(t.size * t.dtype.itemsize, t.dtype.itemsize)

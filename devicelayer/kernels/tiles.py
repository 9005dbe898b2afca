"""Which tile shape the tiled GEMM and convolution kernels use: the ops' static rule, a measured choice, or one
forced while a plan is measured.

The ops ask ``micro_tile`` (``ops/matmul.py``) while they plan.  It answers with the micro-tile edge forced on this
thread (``forcing``: what ``tile_tuning`` does while it times each candidate), else with its static rule; and it
notes on this thread how much work the tiled launches it answered for do (``noting``), so that the tuner knows a
plan is worth timing.  Nothing here touches a device.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

#: the micro-tile edges the tiled kernels are built for: 32 x 32, 64 x 64 and 128 x 128 output tiles per group
MICRO_EDGES = (2, 4, 8)

_state = threading.local()


def forced() -> int | None:
    """The micro-tile edge forced on this thread, or None."""
    return getattr(_state, "forced", None)


@contextlib.contextmanager
def forcing(micro: int) -> Iterator[None]:
    """Every tiled launch planned on this thread inside the block takes ``micro`` (where its shared memory
    takes it: ``micro_tile`` checks)."""
    if micro not in MICRO_EDGES:
        raise ValueError(f"micro-tile edge {micro!r} is not one of {MICRO_EDGES}")
    before = forced()
    _state.forced = micro
    try:
        yield
    finally:
        _state.forced = before


def note(work: int) -> None:
    """Record that a tiled launch of ``work`` multiply-adds was planned (inside ``noting``)."""
    seen = getattr(_state, "noted", None)
    if seen is not None:
        seen.append(work)


@contextlib.contextmanager
def noting() -> Iterator[list[int]]:
    """The work of every tiled launch planned on this thread inside the block, as a list filled in."""
    before = getattr(_state, "noted", None)
    seen: list[int] = []
    _state.noted = seen
    try:
        yield seen
    finally:
        _state.noted = before

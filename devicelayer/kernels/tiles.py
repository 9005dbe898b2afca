"""Which kernel shape products and convolutions use: the tiled kernels with one of their micro-tile edges (or, for
the tiled convolution, a rectangular micro-tile: ``WIDE_TILES``), or the register-blocked kernels (``REGISTER``);
the ops' static rule, a measured choice, or one forced while a plan is measured.

The ops ask ``register_kernels`` and ``micro_tile`` (``ops/matmul.py``) while they plan.  Those answer with the
shape forced on this thread (``forcing``: what ``tile_tuning`` does while it times each candidate), else with their
static rule; and the ops note on this thread how much work the launches so chosen do (``noting``), so that the
tuner knows a plan is worth timing.  Nothing here touches a device.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator, Union

#: the micro-tile edges the tiled kernels are built for: 32 x 32, 64 x 64 and 128 x 128 output tiles per group
MICRO_EDGES = (2, 4, 8)
#: rectangular micro-tiles (rows, columns) the tiled convolution also takes: 4 x 8, output tiles of 64 channels by
#: 128 positions, for layers of 64 channels or fewer a group, where 128 x 128 tiles would be half padding and
#: 64 x 64 ones read two shared values for each multiply-add a work item does
WIDE_TILES = ((4, 8),)
#: a kernel shape: a micro-tile edge, a rectangular micro-tile of ``WIDE_TILES`` or ``REGISTER``
Shape = Union[int, "tuple[int, int]"]
#: the shape that stands for the register-blocked kernels (``gemm_register.dlk``, ``conv_register.dlk``,
#: ``conv_rows.dlk``: no tiles, no shared memory)
REGISTER = 0
#: the define that marks a register-blocked kernel's spec
REGISTER_DEFINE = ("REGISTER", 1)

_state = threading.local()


def forced() -> Shape | None:
    """The shape forced on this thread (a micro-tile edge, a rectangular micro-tile or ``REGISTER``), or None."""
    return getattr(_state, "forced", None)


@contextlib.contextmanager
def forcing(micro: Shape) -> Iterator[None]:
    """Every product and convolution planned on this thread inside the block takes ``micro``: the tiled kernels
    with that micro-tile edge (where their shared memory takes it: ``micro_tile`` checks), the tiled convolution
    with a rectangular micro-tile of ``WIDE_TILES`` (products keep their static rule then), or the register-blocked
    kernels for ``REGISTER`` (where the op has them)."""
    if micro not in MICRO_EDGES and micro not in WIDE_TILES and micro != REGISTER:
        raise ValueError(f"kernel shape {micro!r} is not one of {MICRO_EDGES}, {WIDE_TILES} or REGISTER ({REGISTER})")
    before = forced()
    _state.forced = micro
    try:
        yield
    finally:
        _state.forced = before


def note(work: int) -> None:
    """Record that a product or convolution launch of ``work`` multiply-adds was planned (inside ``noting``)."""
    seen = getattr(_state, "noted", None)
    if seen is not None:
        seen.append(work)


@contextlib.contextmanager
def noting() -> Iterator[list[int]]:
    """The work of every product and convolution launch planned on this thread inside the block, as a list
    filled in."""
    before = getattr(_state, "noted", None)
    seen: list[int] = []
    _state.noted = seen
    try:
        yield seen
    finally:
        _state.noted = before

"""Copies between large host arrays split across a few threads.

One thread's copy is bound by what one core can move (about 9-13 GB/s), so staging a batch of images into pinned
memory before its DMA took longer than the DMA itself: ResNet-50's batch-16 input of 9.6 MB took 0.7-1.1 ms to
upload on an H200 machine.  NumPy's copies release the interpreter lock, so pieces of one copy run at once on
``MOST_THREADS`` threads.
"""

from __future__ import annotations

import numpy as np

from . import cpus
from .threads import DaemonPool

#: arrays smaller than this are copied on the calling thread alone (a hand-off costs more than it saves: into
#: pinned memory on an H200 machine, 1.2 MB took 67 us alone and 86 us on two threads)
PARALLEL_LEAST = 2 << 20
#: the least bytes a piece of a split copy holds (2.46 MB: 207 us alone, 171 on two threads, 127 on three)
PIECE_LEAST = 768 << 10
#: the most threads one copy runs on, the caller's included
MOST_THREADS = 4

_pool = DaemonPool(MOST_THREADS - 1, "devicelayer-copy")


def copy_into(dst: np.ndarray, src: np.ndarray) -> None:
    """``np.copyto(dst, src, casting="no")``; where both are C-contiguous arrays of one shape and type of
    ``PARALLEL_LEAST`` bytes or more, in pieces on up to ``MOST_THREADS`` threads (no more than the process's CPUs)."""
    if dst.nbytes < PARALLEL_LEAST:  # (most copies: no more to ask)
        np.copyto(dst, src, casting="no")
        return
    threads = min(MOST_THREADS, cpus.count(), dst.nbytes // PIECE_LEAST)
    if (threads < 2 or dst.shape != src.shape or dst.dtype != src.dtype
            or not (dst.flags.c_contiguous and src.flags.c_contiguous) or np.may_share_memory(dst, src)):
        np.copyto(dst, src, casting="no")
        return
    to, frm = dst.reshape(-1), src.reshape(-1)
    bounds = [to.size * i // threads for i in range(threads + 1)]
    pieces = [(to[a:b], frm[a:b]) for a, b in zip(bounds, bounds[1:])]
    futures = [_pool.submit(np.copyto, d, s) for d, s in pieces[1:]]
    try:
        np.copyto(*pieces[0])
    finally:
        for f in futures:  # (every piece finished before the caller reads dst or frees src)
            f.result()

"""Float32 transposes on the host through one oneDNN reorder on the OpenMP team.

NumPy copies a transposed view on one thread; a transformer moves most of its activations through transposes
(ConvNeXt-T: 46 a run, 180 us each on 16 cores).  A float32 transpose too large to run on the calling thread
alone (``eltwise.is_small``) and whose innermost axis moves runs as oneDNN's reorder on the team the products
and convolutions use, after its axes are simplified (axes of one element dropped, input axes that stay neighbours
merged).  Smaller ones, other dtypes, outputs overlapping their input and transposes that keep the innermost
axis (whole rows move: NumPy's copy took 87 us against oneDNN's 113 for YOLOv8's (4, 16, 8400) on the 2-core VM,
where a (3136, 384) transpose took 2651 us against 232) run NumPy.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from . import dnnl as host_dnnl
from .backend import HostVendor
from .dnnl_layers import TransposeLayer
from .eltwise import apart_or_layer, cached_layer, is_small

#: oneDNN's most dimensions (DNNL_MAX_NDIMS)
MAX_DIMS = 12


def simplified(shape: Sequence[int], perm: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The same transpose over fewer axes: axes of one element dropped, runs of input axes that stay neighbours
    in the output merged into one."""
    runs: list[list[int]] = []
    for p in (p for p in perm if shape[p] != 1):
        if runs and runs[-1][-1] + 1 == p:
            runs[-1].append(p)
        else:
            runs.append([p])
    order = sorted(range(len(runs)), key=lambda r: runs[r][0])  # the runs in input order
    return (tuple(math.prod(shape[a] for a in runs[r]) for r in order),
            tuple(order.index(r) for r in range(len(runs))))


class OnednnTranspose(HostVendor):
    """``transpose`` of large float32 tensors through oneDNN's reorder."""

    def route(self, ins: Any, attrs: dict) -> TransposeLayer | None:
        """The layer running this transpose (built once per simplified geometry), None where NumPy runs it."""
        x = ins[0]
        if x.dtype not in host_dnnl.DTYPES or is_small(x.size):
            return None
        shape, perm = simplified(x.shape, attrs["perm"])
        if len(shape) > MAX_DIMS or not perm or perm[-1] == len(perm) - 1:
            return None  # an identity, or rows that stay whole: NumPy copies them a row at a time as fast
        return cached_layer(self.dev, (self.name, (shape, perm), ()), lambda: TransposeLayer(shape, perm), x.size)

    def accepts(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Large float32 transposes that oneDNN builds a reorder for."""
        return self.route(ins, attrs) is not None

    def bind(self, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any) -> Callable[[], None]:
        """The transpose on these buffers as a call on the host worker (NumPy where the two overlap)."""
        return apart_or_layer(self, ins, outs, attrs, in_bufs, out_bufs)

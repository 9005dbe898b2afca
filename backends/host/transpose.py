"""Float32 transposes on the host through one oneDNN reorder on the OpenMP team.

NumPy copies a transposed view on one thread; a transformer moves most of its activations through transposes
(ConvNeXt-T: 46 a run, 180 us each on 16 cores).  A float32 transpose too large to run on the calling thread
alone (``eltwise.is_small``) and whose innermost axis moves runs as oneDNN's reorder on the team the products
and convolutions use, after its axes are simplified (axes of one element dropped, input axes that stay neighbours
merged).  Smaller ones, other dtypes, outputs overlapping their input and transposes that keep the innermost
axis (whole rows move: NumPy's copy took 87 us against oneDNN's 113 for YOLOv8's (4, 16, 8400) on the 2-core VM,
where a (3136, 384) transpose took 2651 us against 232) run NumPy.

Between a plan's oneDNN ops a 3-5 dimensional tensor may be held channels-last (``dnnl_op``); a transpose of 3-5
dimensions reads and writes either layout.  ConvNeXt's blocks move every activation to (N, H, W, C) after the
depthwise convolution and back before the residual addition: held channels-last on the convolution's side, both
are the input's bytes as they are, one copy (1x96x56x56 on the 2-core VM: 60-100 us, against 250-370 us for the
plain transpose and the convolution's reorder each).  Layouts that leave the bytes in another order take one
oneDNN reorder between the two strided forms.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from . import dnnl as host_dnnl, omp as host_omp
from .backend import HostVendor
from .binary import logical
from .dnnl_layers import TransposeLayer
from .dnnl_op import OnednnOp
from .eltwise import apart_or_layer, cached_layer, is_small, reference_call
from .stretch import team_call

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


def strided_reorder(dev: Any, shape: Sequence[int], perm: Sequence[int], x_strides: Sequence[int],
                    y_strides: Sequence[int]) -> TransposeLayer | None:
    """The device's oneDNN reorder (built once) of a float32 tensor of ``shape`` held with ``x_strides`` into its
    transpose by ``perm`` held with ``y_strides`` (strides in elements); None where oneDNN builds none."""
    key = ("transpose", (tuple(shape), tuple(perm), tuple(x_strides), tuple(y_strides)), ())
    return cached_layer(dev, key, lambda: TransposeLayer(shape, perm, x_strides, y_strides), math.prod(shape))


class OnednnTranspose(HostVendor):
    """``transpose`` of large float32 tensors through oneDNN's reorder, reading and writing the plan's
    channels-last layout (see the module)."""

    private_layout = OnednnOp.private_layout

    def __init__(self, dev: Any, name: str, library: str, in_last: bool = False, out_last: bool = False) -> None:
        super().__init__(dev, name, library)
        self._library, self._in_last, self._out_last = library, in_last, out_last

    # -- the plan's channels-last layout -------------------------------------------------------------
    def offers_layout(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Transposes of 3-5 dimensions (the layout offered for both ends: the plan keeps each where its other side
        takes it)."""
        return 3 <= len(ins[0].shape) <= 5

    def layout_input(self, index: int) -> bool:
        """The input, of 3-5 dimensions (read through a reorder from its strides)."""
        return index == 0

    def with_layout(self, in_last: frozenset[int], out_last: bool) -> "OnednnTranspose":
        """This transpose reading its input and writing its output channels-last as given."""
        return OnednnTranspose(self.dev, self.name, self._library, 0 in in_last, bool(out_last))

    # -- routes --------------------------------------------------------------------------------------
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
        if not (self._in_last or self._out_last):
            return apart_or_layer(self, ins, outs, attrs, in_bufs, out_bufs)
        pool = self.dev.pool
        t, u = ins[0], outs[0]
        n = t.size * 4
        x, y = pool._bytes(in_bufs[0])[:n], pool._bytes(out_bufs[0])[:n]
        perm = tuple(attrs["perm"])
        xs = host_dnnl.last_strides(t.shape) if self._in_last else host_dnnl.dense(t.shape)
        ys = host_dnnl.last_strides(u.shape) if self._out_last else host_dnnl.dense(u.shape)
        if not np.may_share_memory(x, y):
            if all(xs[p] == s for p, s, d in zip(perm, ys, u.shape) if d > 1):  # the same bytes in the same order

                def copy() -> None:
                    np.copyto(y, x)
                return team_call(copy, False)
            layer = strided_reorder(self.dev, t.shape, perm, xs, ys)
            if layer is not None:
                call = layer.bind(x.ctypes.data, y.ctypes.data, keep=(x, y))
                small = is_small(t.size)
                return team_call(host_omp.alone(host_dnnl.library(), call) if small else call, not small)
        return reference_call(self.name, [logical(x, t, self._in_last)], logical(y, u, self._out_last), attrs)

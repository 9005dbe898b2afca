"""Float32 additions, subtractions, products and quotients on the host through oneDNN's binary primitive, and
channels-last tensors through them.

NumPy runs ``a + b`` on one thread; between a transformer's products and normalizations on oneDNN's OpenMP team
(ConvNeXt-T: 36 residual and bias additions a run, about 200 us each on 16 cores) that leaves the other cores
idle.  Where the output is too large to run on the calling thread alone (``eltwise.is_small``), both inputs are
float32 and one of them has the output's shape, the op runs as oneDNN's binary primitive on the team, the other
input broadcast along its axes of one element (for ``sub`` and ``div`` that must be the second); a small one with
a per-channel operand (below) runs the primitive alone where the host runner is there to batch it (a
squeeze-and-excitation product of a small model: 1.4-3 us through NumPy on the VM, a fraction of that in a
batch).  Others run
NumPy, as do outputs overlapping an input anywhere but exactly (oneDNN computes in place over its first input).

A float32 (N, C, spatial...) tensor combined with one that varies along N and C only (a squeeze-and-excitation
gate, a per-channel scale or shift) is a call of the plan's channels-last layout (``host_dnnl_op``): the tensor
and the result may stay channels-last between oneDNN convolutions (the other operand's memory is the same in
both layouts).  Those calls run oneDNN's primitive on the layout where it is large, else NumPy over views of it.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import dnnl as host_dnnl, omp as host_omp, runner as host_runner
from .backend import HostVendor
from .dnnl_layers import BinaryLayer
from .dnnl_op import Binding, OnednnOp
from .eltwise import cached_layer, is_small, reference_call
from .stretch import team_call

#: op name -> oneDNN's algorithm (dnnl_alg_kind_t) and whether its operands may swap
ALGORITHMS = {"add": (0x1FFF0, True), "mul": (0x1FFF1, True), "div": (0x1FFF4, False), "sub": (0x1FFF5, False)}


def channel_operand(ins: Any, outs: Any) -> int | None:
    """Which input has the output's shape where the call is float32 over (N, C, spatial...) with the other
    input varying along N and C only (so its memory is one in both layouts); else None."""
    y = outs[0]
    if not 3 <= len(y.shape) <= 5 or len(ins) != 2 or any(t.dtype not in host_dnnl.DTYPES for t in (*ins, y)):
        return None
    for full, other in ((0, 1), (1, 0)):
        s = ins[other].shape
        s = (1,) * (len(y.shape) - len(s)) + tuple(s)
        if ins[full].shape == y.shape and s != y.shape and all(n == 1 for n in s[2:]):
            return full
    return None


def logical(view: np.ndarray, t: Any, last: bool) -> np.ndarray:
    """The bytes ``view`` of tensor type ``t`` as an array of its shape: channels-last memory as a view."""
    arr = view[:t.size * t.dtype.itemsize].view(t.dtype)
    if not last:
        return arr.reshape(t.shape)
    return np.moveaxis(arr.reshape((t.shape[0], *t.shape[2:], t.shape[1])), -1, 1)


class OnednnBinary(HostVendor):
    """``add``, ``mul``, ``sub`` and ``div`` of float32 tensors through oneDNN (see the module)."""

    private_layout = OnednnOp.private_layout

    def __init__(self, dev: Any, name: str, library: str, binding: Binding = Binding()) -> None:
        super().__init__(dev, name, library)
        self._library, self._binding = library, binding

    # -- the plan's channels-last layout -------------------------------------------------------------
    def offers_layout(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Calls with a per-channel operand (``channel_operand``)."""
        return channel_operand(ins, outs) is not None

    def layout_input(self, index: int) -> bool:
        """Either input (the per-channel one's memory is the same in both layouts)."""
        return index in (0, 1)

    def with_layout(self, in_last: frozenset[int], out_last: bool) -> "OnednnBinary":
        """This op reading inputs ``in_last`` and writing its output channels-last."""
        return OnednnBinary(self.dev, self.name, self._library, Binding(in_last=frozenset(in_last),
                                                                        out_last=bool(out_last)))

    # -- routes --------------------------------------------------------------------------------------
    def _operands(self, ins: Any, outs: Any) -> tuple[int, int] | None:
        """Which input is oneDNN's first (of the output's shape) and which its second, or None for NumPy."""
        y = outs[0]
        if y.dtype not in host_dnnl.DTYPES or any(t.dtype != y.dtype for t in ins) or y.size == 0:
            return None
        if is_small(y.size) and (channel_operand(ins, outs) is None or not host_runner.available()):
            return None  # (a small per-channel one runs alone where the runner batches it)
        if ins[0].shape == y.shape:
            return 0, 1
        if ins[1].shape == y.shape and ALGORITHMS[self.name][1]:
            return 1, 0
        return None

    def route(self, ins: Any, outs: Any, last: bool = False) -> tuple[BinaryLayer, tuple[int, int]] | None:
        """The layer running this op and its operand order (built once per shapes and layout), None where NumPy
        runs it; ``last``: the full operand and the output are channels-last."""
        order = self._operands(ins, outs)
        if order is None:
            return None
        rank = len(outs[0].shape)
        a = tuple(outs[0].shape)
        b = (1,) * (rank - len(ins[order[1]].shape)) + tuple(ins[order[1]].shape)
        alg = ALGORITHMS[self.name][0]
        layer = cached_layer(self.dev, (self.name, (a, b), ("last",) if last else ()),
                             lambda: BinaryLayer(a, b, alg, last), outs[0].size)
        return None if layer is None else (layer, order)

    def accepts(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Large float32 operands, one of the output's shape, that oneDNN builds a primitive for; and every call
        with a per-channel operand (which a plan may keep channels-last)."""
        return self.offers_layout(ins, outs, attrs) or self.route(ins, outs) is not None

    def bind(self, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any) -> Callable[[], None]:
        """The op on these buffers as a call on the host worker (NumPy where the output overlaps an input other
        than exactly as oneDNN's first, or the layouts of the full operand and the output differ)."""
        pool = self.dev.pool
        views = [pool._bytes(b)[:t.size * t.dtype.itemsize] for b, t in zip(in_bufs, ins)]
        y = pool._bytes(out_bufs[0])[:outs[0].size * outs[0].dtype.itemsize]
        full = channel_operand(ins, outs)
        in_last, out_last = self._binding.in_last, self._binding.out_last
        last = full is not None and full in in_last
        if full is None or last == out_last:
            found = self.route(ins, outs, last)
            if found is not None:
                layer, (first, second) = found
                a, b = views[first], views[second]
                if not np.may_share_memory(b, y) and (a.ctypes.data == y.ctypes.data
                                                      or not np.may_share_memory(a, y)):
                    pa, pb, py = a.ctypes.data, b.ctypes.data, y.ctypes.data
                    call = layer.bind(pa, pb, py, keep=(views, y))
                    if is_small(outs[0].size):
                        return team_call(host_omp.alone(host_dnnl.library(), call), False)
                    return team_call(call, True)
        arrays = [logical(v, t, i == full and i in in_last) for i, (v, t) in enumerate(zip(views, ins))]
        out = logical(y, outs[0], out_last and full is not None)
        if any(np.may_share_memory(x, out) and (x.ctypes.data != out.ctypes.data or x.strides != out.strides)
               for x in arrays):
            return reference_call(self.name, arrays, out, attrs)  # (an eager out= over part of an input)
        from devicelayer.kernels.op import get

        # (NumPy, over the host's own threads where large: no OpenMP team wakes)
        return team_call(get(self.name).bind_into(arrays, [out], attrs), False)

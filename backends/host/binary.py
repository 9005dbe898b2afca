"""Large float32 additions, subtractions, products and quotients on the host through oneDNN's binary primitive.

NumPy runs ``a + b`` on one thread; between a transformer's products and normalizations on oneDNN's OpenMP team
(ConvNeXt-T: 36 residual and bias additions a run, about 200 us each on 16 cores) that leaves the other cores
idle.  Where the output is too large to run on the calling thread alone (``eltwise.is_small``), both inputs are
float32 and one of them has the output's shape, the op runs as oneDNN's binary primitive on the team, the other
input broadcast along its axes of one element (for ``sub`` and ``div`` that must be the second).  Others run
NumPy, as do outputs overlapping an input anywhere but exactly (oneDNN computes in place over its first input).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import dnnl as host_dnnl
from .backend import HostVendor
from .dnnl_layers import BinaryLayer
from .eltwise import cached_layer, is_small, reference_call
from .stretch import team_call

#: op name -> oneDNN's algorithm (dnnl_alg_kind_t) and whether its operands may swap
ALGORITHMS = {"add": (0x1FFF0, True), "mul": (0x1FFF1, True), "div": (0x1FFF4, False), "sub": (0x1FFF5, False)}


class OnednnBinary(HostVendor):
    """``add``, ``mul``, ``sub`` and ``div`` of large float32 tensors through oneDNN."""

    def _operands(self, ins: Any, outs: Any) -> tuple[int, int] | None:
        """Which input is oneDNN's first (of the output's shape) and which its second, or None for NumPy."""
        y = outs[0]
        if is_small(y.size) or y.dtype not in host_dnnl.DTYPES or any(t.dtype != y.dtype for t in ins):
            return None
        if ins[0].shape == y.shape:
            return 0, 1
        if ins[1].shape == y.shape and ALGORITHMS[self.name][1]:
            return 1, 0
        return None

    def route(self, ins: Any, outs: Any) -> tuple[BinaryLayer, tuple[int, int]] | None:
        """The layer running this op and its operand order (built once per shapes), None where NumPy runs it."""
        order = self._operands(ins, outs)
        if order is None:
            return None
        rank = len(outs[0].shape)
        a = tuple(outs[0].shape)
        b = (1,) * (rank - len(ins[order[1]].shape)) + tuple(ins[order[1]].shape)
        alg = ALGORITHMS[self.name][0]
        layer = cached_layer(self.dev, (self.name, (a, b), ()), lambda: BinaryLayer(a, b, alg), outs[0].size)
        return None if layer is None else (layer, order)

    def accepts(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Large float32 operands, one of the output's shape, that oneDNN builds a primitive for."""
        return self.route(ins, outs) is not None

    def bind(self, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any) -> Callable[[], None]:
        """The op on these buffers as a call on the host worker (NumPy where the output overlaps an input other
        than exactly as oneDNN's first)."""
        pool = self.dev.pool
        views = [pool._bytes(b)[:t.size * t.dtype.itemsize] for b, t in zip(in_bufs, ins)]
        y = pool._bytes(out_bufs[0])[:outs[0].size * outs[0].dtype.itemsize]
        found = self.route(ins, outs)
        if found is not None:
            layer, (first, second) = found
            a, b = views[first], views[second]
            if not np.may_share_memory(b, y) and (a.ctypes.data == y.ctypes.data or not np.may_share_memory(a, y)):
                pa, pb, py = a.ctypes.data, b.ctypes.data, y.ctypes.data
                return team_call(lambda keep=(views, y): layer.run(pa, pb, py), True)
        return reference_call(self.name, [v.view(t.dtype).reshape(t.shape) for v, t in zip(views, ins)],
                              y.view(outs[0].dtype).reshape(outs[0].shape), attrs)

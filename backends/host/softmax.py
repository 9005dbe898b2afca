"""Float32 softmax and log-softmax on the host through oneDNN's softmax primitive.

NumPy's softmax is four passes with an ``exp`` that runs an element at a time
here; oneDNN's is one JIT kernel.  Tensors of at least ``MIN_ELEMENTS``
float32 elements whose axis is the last one (or is followed by axes of size
1) run it, seen as rows of (outer, K); smaller ones, other dtypes and an axis
with elements after it run NumPy (oneDNN's kernel for rows strided along the
axis took 10-40x NumPy's time on the VM: YOLOv8's DFL softmax of
(4, 16, 8400) along the 16, 55 against 2 ms).
"""

from __future__ import annotations

import math
from typing import Any, Callable

from .backend import HostVendor
from .dnnl_layers import SoftmaxLayer
from . import dnnl as host_dnnl, runner as host_runner
from .eltwise import apart_or_layer, cached_layer

#: tensors with fewer elements run NumPy (a bound oneDNN call took 2.8-5.1 us on the VM from 16 to 1024 elements,
#: NumPy's passes 12-14 us), except where the host runner runs the layer in a batch (``runner.available``): a
#: classifier's two-class softmax took 5.3 us through NumPy
MIN_ELEMENTS = 16


def rows(shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    """The (outer, K) or (outer, K, inner) view of ``shape`` along ``axis``."""
    outer, inner = math.prod(shape[:axis]), math.prod(shape[axis + 1:])
    return (outer, shape[axis]) if inner == 1 else (outer, shape[axis], inner)


class OnednnSoftmax(HostVendor):
    """``softmax`` and ``log_softmax`` through oneDNN for float32 tensors of ``MIN_ELEMENTS`` or more, along
    their last axis."""

    def route(self, ins: Any, attrs: dict) -> SoftmaxLayer | None:
        """The layer running these inputs (built once per view), None where NumPy runs them."""
        x = ins[0]
        if x.dtype not in host_dnnl.DTYPES or x.size == 0 or (x.size < MIN_ELEMENTS and not host_runner.available()):
            return None
        view = rows(x.shape, attrs["axis"])
        if len(view) == 3:  # (rows strided along the axis: oneDNN's kernel for them took 10-40x NumPy's time)
            return None
        return cached_layer(self.dev, (self.name, view, ()), lambda: SoftmaxLayer(view, self.name == "log_softmax"),
                            x.size)

    def accepts(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Float32 tensors of ``MIN_ELEMENTS`` or more, along the last axis, that oneDNN builds a primitive for."""
        return self.route(ins, attrs) is not None

    def bind(self, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any) -> Callable[[], None]:
        """The op on these buffers as a call on the host worker (NumPy where the output overlaps the input)."""
        return apart_or_layer(self, ins, outs, attrs, in_bufs, out_bufs)

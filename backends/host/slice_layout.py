"""Slices of float32 tensors on the host, reading and writing the plan's channels-last layout.

ShuffleNet-v2's blocks split their input's channels in two (two Slice nodes) between a channel shuffle and
convolutions that hold activations channels-last (``dnnl_op``). A slice a plan could read only in NCHW made the
shuffle before it and the convolution and concatenation after it convert their ends every block. A slice of a
3-5 dimensional float32 tensor (starts, ends and steps as attributes) runs here in either layout at each end: one
NumPy copy between views of the two memories.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import dnnl as host_dnnl
from .backend import HostVendor
from .binary import logical
from .dnnl_op import Binding, OnednnOp
from .eltwise import reference_call
from .stretch import team_call


def takes(ins: Any) -> bool:
    """Whether a slice of these inputs may run here: one float32 input of 3-5 dimensions."""
    return len(ins) == 1 and 3 <= len(ins[0].shape) <= 5 and ins[0].dtype in host_dnnl.DTYPES


class LayoutSlice(HostVendor):
    """``slice`` of a float32 tensor in NCHW or the plan's channels-last layout at either end (see the module)."""

    private_layout = OnednnOp.private_layout

    def __init__(self, dev: Any, name: str, library: str, binding: Binding = Binding()) -> None:
        super().__init__(dev, name, library)
        self._library, self._binding = library, binding

    def accepts(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Slices of one float32 input of 3-5 dimensions."""
        return takes(ins)

    def offers_layout(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Every call it takes."""
        return takes(ins)

    def layout_input(self, index: int) -> bool:
        """The sliced input."""
        return index == 0

    def with_layout(self, in_last: frozenset[int], out_last: bool) -> "LayoutSlice":
        """This slice reading its input and writing its output channels-last as a plan agreed."""
        return LayoutSlice(self.dev, self.name, self._library, Binding(in_last=frozenset(in_last),
                                                                       out_last=bool(out_last)))

    def bind(self, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any) -> Callable[[], None]:
        """The slice on these buffers as one copy on the host worker."""
        pool = self.dev.pool
        x = logical(pool._bytes(in_bufs[0]), ins[0], 0 in self._binding.in_last)
        y = logical(pool._bytes(out_bufs[0]), outs[0], self._binding.out_last)
        from devicelayer.kernels.op import get

        part = x[get(self.name).index(ins[0].shape, attrs)]
        if np.may_share_memory(part, y):  # (an eager out= over the input)
            return reference_call(self.name, [x], y, attrs)

        def copy() -> None:
            np.copyto(y, part)
        return team_call(copy, False)

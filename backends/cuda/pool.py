"""Pooling on CUDA devices through cuDNN, in NCHW or channels-last.

Max and average pools (and their global forms) of float16, bfloat16, float32 and float64 inputs with 2 or 3 spatial
dims, where cuDNN's legacy API computes exactly what ONNX asks: symmetric pads, no dilation, output sizes as without
``ceil_mode``, no Indices output. A pool reads channels-last activations where a plan keeps its input so (the layout
the convolutions offer, ``conv.DnnConv.private_layout``), and writes them where its readers take them: a CNN's
stem convolution, max pool and first blocks then stay channels-last, with no conversion between them. Other
calls use the op's kernels.
"""

from __future__ import annotations

from typing import Any

from . import dnn as cuda_dnn
from .conv import LAST_DTYPES
from .backend import _address, _Vendor

#: the pools served (op names) and their kind
KINDS = {"max_pool": "max", "average_pool": "avg", "global_average_pool": "avg", "global_max_pool": "max"}


def _geometry(name: str, ins: Any, outs: Any, attrs: dict) -> tuple | None:
    """(window, pads, strides, mode) of a call cuDNN computes as ONNX defines it, else None."""
    from devicelayer.kernels.ops.pooling import _Pool  # (an op-library helper: the output size rule)

    x, y = ins[0], outs[0]
    nd = len(x.shape) - 2
    if x.dtype not in cuda_dnn.DTYPES or not 2 <= nd <= 3 or len(outs) != 1 or x.size == 0 or y.size == 0 \
            or max(x.size, y.size) > cuda_dnn.ELEMENT_LIMIT:
        return None
    if name.startswith("global_"):
        return tuple(x.shape[2:]), (0,) * nd, (1,) * nd, "max" if KINDS[name] == "max" else "avg_include_pad"
    if any(d != 1 for d in attrs["dilations"]):
        return None
    begins, ends, out = _Pool.geometry(x.shape[2:], attrs)
    window, strides = tuple(attrs["kernel_shape"]), tuple(attrs["strides"])
    floor = [(s + b + e - k) // st + 1 for s, b, e, k, st in zip(x.shape[2:], begins, ends, window, strides)]
    if begins != ends or list(out) != floor or any(b >= k for b, k in zip(begins, window)):
        return None
    mode = "max" if KINDS[name] == "max" else (
        "avg_include_pad" if attrs.get("count_include_pad") else "avg_exclude_pad")
    return window, tuple(begins), strides, mode


class DnnPool(_Vendor):
    """A max or average pool through cuDNN (see the module's docstring)."""

    #: the device-private layout it shares with the convolutions (activations (N, H, W, C))
    private_layout = "cuda-channels-last"

    def __init__(self, dev: Any, name: str, library: str,
                 binding: tuple[frozenset[int], bool] = (frozenset(), False)) -> None:
        super().__init__(dev, name, library)
        self._library, self._binding = library, binding

    def _layer(self, ins: Any, outs: Any, attrs: dict) -> Any:
        found = _geometry(self.name, ins, outs, attrs)
        if found is None:
            return None
        window, pads, strides, mode = found
        lasts = (0 in self._binding[0], self._binding[1])
        return self.dev._dnn().pool_layer(ins[0].dtype, ins[0].shape, outs[0].shape, window, pads, strides, mode,
                                          lasts)

    def accepts(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Pools cuDNN computes as ONNX defines them (their descriptors made here, once)."""
        try:
            return self._layer(ins, outs, attrs) is not None
        except cuda_dnn.DnnError as exc:
            self.dev._dnn().refuse(str(exc))
            return False

    def layout_input(self, index: int) -> bool:
        """The input can be read channels-last."""
        return index == 0

    def offers_layout(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """2-D pools of the types the convolutions keep channels-last (``conv.LAST_DTYPES``)."""
        return len(ins[0].shape) == 4 and ins[0].dtype in LAST_DTYPES

    def with_layout(self, in_last: frozenset[int], out_last: bool) -> "DnnPool":
        """This op reading its input and writing its output channels-last as a plan agreed."""
        return DnnPool(self.dev, self.name, self._library, (frozenset(in_last), bool(out_last)))

    def describe(self, ins: Any, outs: Any, attrs: dict) -> str:
        """The layouts of its ends."""
        return f"cuDNN pool, channels-last ends: inputs {sorted(self._binding[0])}" + (
            ", output" if self._binding[1] else "")

    def enqueue(self, stream: Any, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any) -> None:
        """Queue the pool on ``stream`` (the device is current)."""
        layer = self._layer(ins, outs, attrs)
        if layer is None:
            raise cuda_dnn.DnnError(f"{self.label}: cuDNN does not take this call")
        self.dev._dnn().pool_forward(layer, stream.ptr, _address(in_bufs[0]), _address(out_bufs[0]))

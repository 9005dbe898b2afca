"""Pools, batch normalization, channel shuffles and channel concatenation on the host through oneDNN, where it
is installed.

They read and write channels-last tensors where the plan negotiated it, so a
model's tensors stay channels-last from one oneDNN convolution to the next
through the ops between them (``host_dnnl_op``), and they run on the same
OpenMP team as the convolutions.  Calls oneDNN does not express the way the
op defines them run the op's NumPy implementation: other dtypes, other axes,
windows with no input element, and average pools counting padding where
``ceil_mode`` reaches past the end pad.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from . import dnnl as host_dnnl
from .dnnl_layers import (POOL_AVG_EXCLUDE_PAD, POOL_AVG_INCLUDE_PAD, POOL_MAX, ConcatLayer, NormLayer,
                               PoolLayer, ShuffleLayer)
from .dnnl_op import Binding, OnednnOp


def _planar(ins: Any, outs: Any) -> bool:
    """Float32 (N, C, spatial...) operands of rank 3-5 with elements."""
    return (all(t.dtype in host_dnnl.DTYPES for t in (*ins, *outs)) and 3 <= len(ins[0].shape) <= 5
            and all(t.size for t in (*ins, *outs)))


def _window_pads(size: int, out: int, kernel: int, stride: int, dilation: int, begin: int,
                 end: int) -> int | None:
    """The end pad oneDNN needs for ``out`` windows (more than ``end`` where ceil_mode adds a window), None where
    some window holds no input element."""
    ext = (kernel - 1) * dilation + 1
    if (size + begin + end - ext) // stride + 1 != out:
        end = (out - 1) * stride + ext - size - begin
    pos = (np.arange(out) * stride - begin)[:, None] + np.arange(kernel)[None, :] * dilation
    return end if ((pos >= 0) & (pos < size)).any(axis=1).all() else None


class OnednnPool(OnednnOp):
    """``max_pool``, ``average_pool``, ``global_average_pool`` and ``global_max_pool`` in float32."""

    def _key(self, ins: Any, outs: Any, attrs: dict) -> tuple | None:
        if len(outs) != 1 or not _planar(ins, outs):
            return None
        x, y = ins[0].shape, outs[0].shape
        nd = len(x) - 2
        if self.name.startswith("global_"):
            alg = POOL_MAX if self.name == "global_max_pool" else POOL_AVG_EXCLUDE_PAD
            return (alg, x, y, x[2:], (1,) * nd, (1,) * nd, (0,) * nd, (0,) * nd)
        from devicelayer.kernels.op import get

        kernel, strides, dilations = attrs["kernel_shape"], attrs["strides"], attrs["dilations"]
        begins, ends, _ = get(self.name).geometry(x[2:], attrs)
        reach = [_window_pads(*dims) for dims in zip(x[2:], y[2:], kernel, strides, dilations, begins, ends)]
        if None in reach:
            return None
        if self.name == "max_pool":
            alg = POOL_MAX
        elif attrs["count_include_pad"]:
            if reach != list(ends):  # the op counts no position past the end pad; oneDNN counts the whole window
                return None
            alg = POOL_AVG_INCLUDE_PAD
        else:
            alg = POOL_AVG_EXCLUDE_PAD
        return (alg, x, y, tuple(kernel), tuple(strides), tuple(dilations), tuple(begins), tuple(reach))

    def _build(self, key: tuple, ins: Any, outs: Any, attrs: dict, binding: Binding) -> PoolLayer:
        alg, x, y, kernel, strides, dilations, begins, ends = key
        return PoolLayer(x, y, alg, kernel, strides, dilations, begins, ends, 0 in binding.in_last,
                         binding.out_last)


class OnednnNorm(OnednnOp):
    """``batch_normalization`` (inference, ReLU fused where asked) in float32."""

    def _key(self, ins: Any, outs: Any, attrs: dict) -> tuple | None:
        if not _planar(ins[:1], outs) or any(t.dtype not in host_dnnl.DTYPES for t in ins[1:]):
            return None
        return (ins[0].shape, float(attrs["epsilon"]), attrs.get("activation") == "relu")

    def _build(self, key: tuple, ins: Any, outs: Any, attrs: dict, binding: Binding) -> NormLayer:
        x, epsilon, relu = key
        return NormLayer(x, epsilon, relu, 0 in binding.in_last, binding.out_last)


class OnednnShuffle(OnednnOp):
    """``channel_shuffle`` in float32."""

    def _key(self, ins: Any, outs: Any, attrs: dict) -> tuple | None:
        return (ins[0].shape, attrs["group"]) if _planar(ins, outs) else None

    def _build(self, key: tuple, ins: Any, outs: Any, attrs: dict, binding: Binding) -> ShuffleLayer:
        x, group = key
        return ShuffleLayer(x, group, 0 in binding.in_last, binding.out_last)


class OnednnConcat(OnednnOp):
    """``concat`` along the channels (axis 1) in float32; any input can be channels-last."""

    def layout_input(self, index: int) -> bool:
        return True

    def _key(self, ins: Any, outs: Any, attrs: dict) -> tuple | None:
        if attrs["axis"] != 1 or not _planar(ins, outs) or len({len(t.shape) for t in ins}) != 1:
            return None
        return (tuple(t.shape for t in ins), outs[0].shape)

    def _build(self, key: tuple, ins: Any, outs: Any, attrs: dict, binding: Binding) -> ConcatLayer:
        xs, y = key
        return ConcatLayer(xs, y, 1, [i in binding.in_last for i in range(len(xs))], binding.out_last)

    def _call(self, layer: Any, ptrs: Sequence[int], binding: Binding) -> Callable[[], None]:
        xs, y = list(ptrs[:-1]), ptrs[-1]
        return layer.bind(xs, y)

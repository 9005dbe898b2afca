"""Convolutions on the host through oneDNN, where it is installed.

Every float32 convolution oneDNN can build (1-3-D, grouped, with bias, Z and
an activation as oneDNN's eltwise post-op) runs through it (``host_dnnl.ConvLayer``, one per geometry, kept in
``HostDevice.onednn_layers``); the rest run the op's NumPy implementation.
All of a model's convolutions go one way on purpose: oneDNN's OpenMP threads
and OpenBLAS's threads each spin for a while after their work, and
alternating between the two pools on the same cores costs more than either
saves.

In a plan, constant weights are reordered into oneDNN's layout once
(``specialize``), and tensors stay channels-last between oneDNN ops where the
plan negotiated it (``host_dnnl_op``).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from . import dnnl as host_dnnl, omp as host_omp
from .dnnl_op import Binding, OnednnOp
from .eltwise import ALGORITHMS


#: with a team of two threads, convolutions and products of fewer floating-point operations run on one thread
#: (about 40 us of work there; measured on the 2-core VM); ``small_flops`` scales it to the team's size
SMALL_FLOPS = 4_000_000
#: the least ``small_flops`` gives, however large the team
SMALL_FLOPS_LEAST = 250_000


@functools.cache
def small_flops() -> float:
    """The work under which a convolution or product runs on one thread: ``SMALL_FLOPS`` times two over the size
    of oneDNN's team (at least ``SMALL_FLOPS_LEAST``), since a larger team divides more of the work for the
    same cost of waking it.  On the 16-core H100 machine the two-thread figure left MobileNetV2's depthwise
    layers on one thread, 1.52-1.63x onnxruntime; 0.25-1 MFLOP gave 1.12-1.19x there, and ShuffleNet-v2,
    EfficientNet-B0 and SqueezeNet no slower."""
    return max(SMALL_FLOPS * 2 / max(host_omp.team_size(host_dnnl.library()), 2), SMALL_FLOPS_LEAST)


def post_op(attrs: dict) -> tuple[int, float, float] | None:
    """The conv's checked activation as oneDNN's eltwise post-op (algorithm, alpha, beta), or None (clip: its
    bounds, unbounded ends as float32's largest)."""
    name = attrs.get("activation")
    if name is None:
        return None
    if name == "clip":
        big = float(np.finfo(np.float32).max)
        return (host_dnnl.ELTWISE_CLIP, max(attrs["activation_min"], -big), min(attrs["activation_max"], big))
    algorithm, params = ALGORITHMS[name]  # (the checked attributes fill in alpha and beta where the op takes them)
    return (algorithm, *params({"alpha": attrs.get("activation_alpha"), "beta": attrs.get("activation_beta")}))


class OnednnConv(OnednnOp):
    """Float32 convolutions through oneDNN (see the module's docstring)."""

    layout_inputs = frozenset({0, 3})
    layer_per_layout = False  # the layer takes each operand's layout per call

    def _key(self, ins: Any, outs: Any, attrs: dict) -> tuple | None:
        nd = len(ins[0].shape) - 2
        if ins[0].dtype not in host_dnnl.DTYPES or not 1 <= nd <= 3 or any(t.size == 0 for t in (*ins, *outs)):
            return None
        return (tuple(t.shape for t in ins), outs[0].shape, tuple(attrs["pads"]), tuple(attrs["strides"]),
                tuple(attrs["dilations"]), attrs["group"], post_op(attrs))

    def _build(self, key: tuple, ins: Any, outs: Any, attrs: dict, binding: Binding) -> host_dnnl.ConvLayer:
        return host_dnnl.ConvLayer(ins[0].shape, ins[1].shape, outs[0].shape, attrs["pads"], attrs["strides"],
                                   attrs["dilations"], attrs["group"], len(ins) >= 3, len(ins) == 4, post_op(attrs))

    def small(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Convolutions of fewer than ``small_flops()`` multiply-adds x 2 run on the calling thread alone."""
        w = ins[1].shape
        return 2 * outs[0].size * math.prod(w[1:]) < small_flops()

    def specialize(self, ins: Any, outs: Any, attrs: dict, constants: Mapping[int, np.ndarray]) -> "OnednnConv":
        """This op with constant weights reordered into oneDNN's layout once."""
        layer = self.route(ins, outs, attrs)
        w = constants.get(1)
        if layer is None or w is None:
            return self
        b = self._binding
        return OnednnConv(self.dev, self.name, Binding(self._on_worker(lambda: layer.prepare_weights(w)),
                                                       b.in_last, b.out_last))

    def _on_worker(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` run by the host's worker thread: oneDNN's OpenMP threads then form one team, the worker's
        (a second team, from the caller's thread, would spin on the same cores)."""
        out: list[Any] = []
        self.dev.run(lambda: out.append(fn()), [], f"prepare {self.label}").wait()
        return out[0]

    def _call(self, layer: Any, ptrs: Sequence[int], binding: Binding) -> Callable[[], None]:
        x, w = ptrs[0], ptrs[1]
        n = len(ptrs) - 1
        b = ptrs[2] if n >= 3 else 0
        z = ptrs[3] if n == 4 else 0
        y = ptrs[-1]
        if binding.weights is not None:
            w = binding.weights.ctypes.data
        x_last, z_last, y_last = 0 in binding.in_last, 3 in binding.in_last, binding.out_last
        prepared = binding.weights is not None
        return layer.bind(x, w, b, y, z, prepared, x_last, z_last, y_last)

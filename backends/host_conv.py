"""Convolutions on the host through oneDNN, where it is installed.

Every float32 convolution oneDNN can build (1-3-D, grouped, with bias, Z and
ReLU) runs through it (``host_dnnl.ConvLayer``, one per geometry, kept in
``HostDevice.conv_routes``); the rest run the op's NumPy implementation.  All
of a model's convolutions go one way on purpose: oneDNN's OpenMP threads and
OpenBLAS's threads each spin for a while after their work, and alternating
between the two pools on the same cores costs more than either saves.

In a plan, constant weights are reordered into oneDNN's layout once
(``specialize``), and a tensor that one oneDNN convolution writes and only
oneDNN convolutions read stays channels-last between them (``with_layout``,
negotiated by the plan): no reorder at either end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from . import host_dnnl
from .host import HostVendor


_ROUTES_KEPT = 1024  # layer geometries kept at once


def _numpy_conv() -> Any:
    from devicelayer.kernels.op import get

    return get("conv")


@dataclass(frozen=True)
class _Binding:
    """What a plan fixed for one convolution: weights in oneDNN's layout, and which operands are channels-last."""

    weights: np.ndarray | None = field(default=None, compare=False)
    in_last: frozenset[int] = frozenset()
    out_last: bool = False


class OnednnConv(HostVendor):
    """Float32 convolutions through oneDNN (see the module's docstring)."""

    #: the device-private layout this op can exchange with its neighbours in a plan, and the inputs that take it
    private_layout = "onednn-channels-last"
    layout_inputs = frozenset({0, 3})

    def __init__(self, dev: Any, name: str, binding: _Binding = _Binding()) -> None:
        super().__init__(dev, name, f"oneDNN {host_dnnl.version()}")
        self._binding = binding

    @staticmethod
    def _key(ins: Any, outs: Any, attrs: dict) -> tuple:
        return (ins[0].dtype, tuple(t.shape for t in ins), outs[0].shape, tuple(attrs["pads"]), tuple(attrs["strides"]),
                tuple(attrs["dilations"]), attrs["group"], attrs.get("activation") == "relu")

    def route(self, ins: Any, outs: Any, attrs: dict) -> "host_dnnl.ConvLayer | None":
        """The oneDNN layer running this geometry, None where NumPy runs it (decided once per geometry)."""
        key = self._key(ins, outs, attrs)
        routes = self.dev.conv_routes
        found = routes.get(key)
        if found is None:
            if len(routes) >= _ROUTES_KEPT:  # layers bound into plans stay alive through their calls
                routes.clear()
            found = routes[key] = self._build(ins, outs, attrs)
        return found["layer"]

    @staticmethod
    def _build(ins: Any, outs: Any, attrs: dict) -> dict[str, Any]:
        nd = len(ins[0].shape) - 2
        if ins[0].dtype not in host_dnnl.DTYPES or not 1 <= nd <= 3 or any(t.size == 0 for t in (*ins, *outs)):
            return {"layer": None, "why": "not a non-empty float32 convolution with 1-3 spatial dimensions"}
        try:
            layer = host_dnnl.ConvLayer(ins[0].shape, ins[1].shape, outs[0].shape, attrs["pads"], attrs["strides"],
                                        attrs["dilations"], attrs["group"], len(ins) >= 3, len(ins) == 4,
                                        attrs.get("activation") == "relu")
        except host_dnnl.DnnlError as exc:
            return {"layer": None, "why": str(exc)}
        return {"layer": layer, "implementation": layer.implementation}

    def accepts(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Float32 convolutions oneDNN builds."""
        return self.route(ins, outs, attrs) is not None

    def specialize(self, ins: Any, outs: Any, attrs: dict, constants: Mapping[int, np.ndarray]) -> "OnednnConv":
        """This op with constant weights reordered into oneDNN's layout once."""
        layer = self.route(ins, outs, attrs)
        w = constants.get(1)
        if layer is None or w is None:
            return self
        b = self._binding
        return OnednnConv(self.dev, self.name, _Binding(self._on_worker(lambda: layer.prepare_weights(w)),
                                                        b.in_last, b.out_last))

    def _on_worker(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` run by the host's worker thread: oneDNN's OpenMP threads then form one team, the worker's
        (a second team, from the caller's thread, would spin on the same cores)."""
        out: list[Any] = []
        self.dev.run(lambda: out.append(fn()), [], f"prepare {self.label}").wait()
        return out[0]

    def with_layout(self, in_last: frozenset[int], out_last: bool) -> "OnednnConv":
        """This op reading inputs ``in_last`` and writing its output in ``private_layout``."""
        b = self._binding
        return OnednnConv(self.dev, self.name, _Binding(b.weights, frozenset(in_last), bool(out_last)))

    def bind(self, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any) -> Callable[[], None]:
        """The convolution on these buffers as a call on the host worker."""
        pool = self.dev.pool
        views = [pool._bytes(b) for b in (*in_bufs, *out_bufs)]
        spans = [(v.ctypes.data, v.ctypes.data + t.size * t.dtype.itemsize) for v, t in zip(views, (*ins, *outs))]
        y, y_end = spans[-1]
        binding = self._binding
        private = bool(binding.in_last or binding.out_last)
        if not private and any(a < y_end and y < b for a, b in spans[:-1]):
            return self._apart(ins, outs, attrs, views)  # an eager out= over an input: NumPy computes apart
        layer = self.route(ins, outs, attrs)
        if layer is None:
            return self._apart(ins, outs, attrs, views)
        x, w = spans[0][0], spans[1][0]
        b = spans[2][0] if len(ins) >= 3 else 0
        z = spans[3][0] if len(ins) == 4 else 0
        weights = binding.weights
        if weights is not None:
            w = weights.ctypes.data
        x_last, z_last, y_last = 0 in binding.in_last, 3 in binding.in_last, binding.out_last
        prepared = weights is not None
        # the closure holds the arrays, not only their addresses: a freed buffer's memory lives until the call ran
        return lambda keep=(weights, views): layer.run(x, w, b, y, z, prepared, x_last, z_last, y_last)

    @staticmethod
    def _apart(ins: Any, outs: Any, attrs: dict, views: list[np.ndarray]) -> Callable[[], None]:
        conv = _numpy_conv()
        arrays = [v[:t.size * t.dtype.itemsize].view(t.dtype).reshape(t.shape) for v, t in zip(views, (*ins, *outs))]
        n = len(ins)

        def run() -> None:
            arrays[n][...] = conv.reference(arrays[:n], attrs)[0]
        return run

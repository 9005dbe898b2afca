"""The base of the host's oneDNN vendor ops: layers kept per geometry and layout, and the layout a plan fixed.

oneDNN's fast CPU kernels read and write channels-last activations.  A plan
negotiates (``devicelayer/graph/layout.py``) which tensors stay channels-last
between oneDNN ops; each op then reads those inputs and writes its output
without a reorder (``with_layout``).  Everything else is NCHW, as the graph.
A plan's oneDNN work that wakes an OpenMP team runs on the host's worker
thread, so oneDNN's OpenMP threads form one team, bound one thread a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np

from . import dnnl as host_dnnl, omp as host_omp
from .backend import HostVendor
from .stretch import team_call

_LAYERS_KEPT = 1024  # layers kept at once per device
#: calls touching fewer bytes run on the calling thread alone (waking a team costs more than it saves)
SMALL_BYTES = 256 << 10


@dataclass(frozen=True)
class Binding:
    """What a plan fixed for one op: constants prepared for oneDNN, and which operands are channels-last."""

    weights: np.ndarray | None = field(default=None, compare=False)
    in_last: frozenset[int] = frozenset()
    out_last: bool = False


class OnednnOp(HostVendor):
    """A host op through oneDNN layers; subclasses give ``_key`` and ``_build`` (and ``_call`` where the layer
    does not take the operands' addresses in order)."""

    #: the device-private layout this op can exchange with its neighbours in a plan
    private_layout = "onednn-channels-last"
    #: the inputs that can take it
    layout_inputs: frozenset[int] = frozenset({0})
    #: whether the layer depends on the layouts (else one layer serves them all, told per call)
    layer_per_layout = True

    def __init__(self, dev: Any, name: str, binding: Binding = Binding()) -> None:
        super().__init__(dev, name, f"oneDNN {host_dnnl.version()}")
        self._binding = binding

    def layout_input(self, index: int) -> bool:
        """Whether input ``index`` can be read in ``private_layout``."""
        return index in self.layout_inputs

    def _key(self, ins: Any, outs: Any, attrs: dict) -> tuple | None:
        """What decides the layer (None: oneDNN does not run this call)."""
        raise NotImplementedError

    def _build(self, key: tuple, ins: Any, outs: Any, attrs: dict, binding: Binding) -> host_dnnl.Layer:
        raise NotImplementedError

    def _call(self, layer: Any, ptrs: Sequence[int], binding: Binding) -> Callable[[], None]:
        """The layer's run on operands at ``ptrs`` (inputs, then the output), bound once: ``layer.bind(*ptrs)``
        unless the op's layer takes them otherwise."""
        return layer.bind(*ptrs)

    def route(self, ins: Any, outs: Any, attrs: dict, binding: Binding | None = None, alone: bool = False) -> Any:
        """The oneDNN layer running this call, None where NumPy runs it (built once per geometry and layout);
        ``alone``: built to run on the calling thread alone whatever its size."""
        key = self._key(ins, outs, attrs)
        if key is None:
            return None
        binding = self._binding if binding is None else binding
        layout = (binding.in_last, binding.out_last) if self.layer_per_layout else ()
        full = (self.name, key, layout) + (("alone",) if alone else ())
        layers = self.dev.onednn_layers
        found = layers.get(full)
        if found is None:
            if len(layers) >= _LAYERS_KEPT:  # layers bound into plans stay alive through their calls
                layers.clear()
            alone = alone or self.small(ins, outs, attrs)
            build = lambda: self._build(key, ins, outs, attrs, binding)  # noqa: E731
            try:
                layer = host_omp.alone(self.lib, build)() if alone else build()
                found = {"layer": layer, "implementation": layer.implementation, "alone": alone}
            except host_dnnl.DnnlError as exc:
                found = {"layer": None, "why": str(exc)}
            layers[full] = found
        return found["layer"]

    @property
    def lib(self) -> Any:
        return host_dnnl.library()

    def small(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Whether a call is too small to gain from oneDNN's OpenMP team: it then runs on the calling thread
        alone (``host_omp.alone``), built that way too.  By the bytes it touches; convolutions by their work."""
        return sum(t.size * t.dtype.itemsize for t in (*ins, *outs)) < SMALL_BYTES

    def accepts(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Calls oneDNN builds a layer for."""
        return self.route(ins, outs, attrs) is not None

    def with_layout(self, in_last: frozenset[int], out_last: bool) -> "OnednnOp":
        """This op reading inputs ``in_last`` and writing its output in ``private_layout``."""
        return self._rebound(replace(self._binding, in_last=frozenset(in_last), out_last=bool(out_last)))

    def _rebound(self, binding: Binding) -> "OnednnOp":
        return type(self)(self.dev, self.name, binding)

    def bind(self, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any) -> Callable[[], None]:
        """The op on these buffers as a call on the host worker."""
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
            if private:  # NumPy reads NCHW only; a plan binds a layout only where the layer is built
                raise host_dnnl.DnnlError(f"{self.label}: no oneDNN layer for {self._binding}")
            return self._apart(ins, outs, attrs, views)
        ptrs = [a for a, _ in spans]
        call = self._call(layer, ptrs, binding)
        keep = (binding.weights, views)
        call.keep = keep  # type: ignore[attr-defined]  # (a freed buffer's memory lives while the call does)
        alone = self.small(ins, outs, attrs)
        if alone:
            return team_call(host_omp.alone(self.lib, call), False)

        def by_itself() -> Callable[[], None] | None:
            single = self.route(ins, outs, attrs, alone=True)
            if single is None or (binding.weights is not None and not single.takes_weights_of(layer)):
                return None
            run_single = self._call(single, ptrs, binding)
            run_single.keep = keep  # type: ignore[attr-defined]
            return host_omp.alone(self.lib, run_single)

        return team_call(call, True, by_itself)

    def _apart(self, ins: Any, outs: Any, attrs: dict, views: list[np.ndarray]) -> Callable[[], None]:
        from devicelayer.kernels.op import get

        op = get(self.name)
        arrays = [v[:t.size * t.dtype.itemsize].view(t.dtype).reshape(t.shape) for v, t in zip(views, (*ins, *outs))]
        n = len(ins)

        def run() -> None:
            arrays[n][...] = op.reference(arrays[:n], attrs)[0]
        return team_call(run, False)

"""ONNX LSTM and GRU on the host through oneDNN's recurrent primitives, where it is installed.

The op library's NumPy LSTM loops over the time steps in Python (crnn's 64-step bidirectional LSTM took about
1.9 ms on the 2-core VM); oneDNN runs the whole layer in one call.  It runs what it computes exactly as ONNX
defines it: float32, the default activations (LSTM sigmoid/tanh/tanh, GRU sigmoid/tanh), no ``clip``, LSTM
without ``input_forget``, and every sequence whole (``sequence_lens`` absent, or each entry reaching the last
step: checked per call, once where it is a constant).  Other calls, and an eager output over an input, run the
op's NumPy implementation.  A plan relays out constant weights once (``specialize``); weights read from
tensors are relaid out on every call.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from . import dnnl as host_dnnl, omp as host_omp, runner as host_runner
from .backend import HostVendor
from .rnn_layer import CELLS, Geometry, RnnLanes, RnnLayer, Weights
from .stretch import team_call

#: layers of fewer floating-point operations a time step run on the calling thread alone: the team meets at
#: every step, and below this its meetings cost more than it saves (on the 2-core VM, T=64 and I=H, alone
#: against the team: LSTM N=1 H=32 157 against 265 us, H=64 368/426, N=4 H=64 815/750, N=1 H=256 4.1/2.6 ms;
#: GRU N=4 H=64 662/790, N=8 H=128 3.8/2.5 ms)
SMALL_STEP_FLOPS = 1 << 18
_DEFAULTS = {"lstm": ("sigmoid", "tanh", "tanh"), "gru": ("sigmoid", "tanh")}
_H0, _C0, _P = 5, 6, 7  # input indices of initial_h, initial_c and P


def geometry(name: str, ins: Any, outs: Any, attrs: dict) -> Geometry | None:
    """The oneDNN layer computing this call as ONNX defines it, None where it does not (NumPy runs it)."""
    x, w = ins[0], ins[1]
    if x.dtype not in host_dnnl.DTYPES or any(t.size == 0 for t in (*ins, *outs)) or attrs["clip"] is not None:
        return None
    dirs = w.shape[0]
    if [a[0] for a in attrs["activations"]] != list(_DEFAULTS[name]) * dirs or attrs.get("input_forget"):
        return None
    cell = "lbr_gru" if name == "gru" and attrs["linear_before_reset"] else name
    layout = attrs["layout"]
    steps, batch = (x.shape[1], x.shape[0]) if layout else x.shape[:2]
    return Geometry(cell, steps, batch, x.shape[2], attrs["hidden_size"], dirs, attrs["direction"] == "reverse",
                    bool(layout), len(ins) > _H0, len(ins) > _C0, len(ins) > _P)


class OnednnRecurrent(HostVendor):
    """``lstm`` and ``gru`` through oneDNN's LSTM, GRU and linear-before-reset GRU (see the module's docstring)."""

    def __init__(self, dev: Any, name: str, weights: Weights | None = None, lens_full: bool = False) -> None:
        super().__init__(dev, name, f"oneDNN {host_dnnl.version()}")
        self._weights, self._lens_full = weights, lens_full

    def route(self, ins: Any, outs: Any, attrs: dict) -> RnnLayer | RnnLanes | None:
        """The layer running these calls (built once per geometry), None where NumPy runs them: a small
        bidirectional layer as its two directions (``RnnLanes``) where the host runner runs them at once."""
        g = geometry(self.name, ins, outs, attrs)
        if g is None:
            return None
        lib, small = host_dnnl.library(), self.small(g)
        # (the runner runs the two directions at once: on the team, or on its helpers)
        lanes = g.dirs == 2 and small and host_omp.team_size(lib) > 1 and host_runner.available()
        key = (self.name, g, ("lanes",) if lanes else ())
        found = self.dev.onednn_layers.get(key)
        if found is None:
            # (built alone where it runs alone: it keeps to one thread)
            build = (lambda: RnnLanes(g)) if lanes else (lambda: RnnLayer(g))  # noqa: E731
            try:
                found = {"layer": (host_omp.alone(lib, build) if small else build)()}
            except host_dnnl.DnnlError as exc:
                found = {"layer": None, "why": str(exc)}
            self.dev.onednn_layers[key] = found
        return found["layer"]

    @staticmethod
    def small(g: Geometry) -> bool:
        """Whether a layer of fewer than ``SMALL_STEP_FLOPS`` a time step runs on the calling thread alone."""
        gates = CELLS[g.cell][0]
        return 2 * g.batch * g.dirs * gates * g.hidden * (g.inputs + g.hidden) < SMALL_STEP_FLOPS

    def accepts(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """float32 calls with the default activations, no clip and no input_forget that oneDNN builds a layer
        for."""
        return self.route(ins, outs, attrs) is not None

    def specialize(self, ins: Any, outs: Any, attrs: dict,
                   constants: Mapping[int, np.ndarray]) -> "OnednnRecurrent":
        """This op with constant W, R, B and P relaid out once, and constant full sequence lengths noted."""
        layer = self.route(ins, outs, attrs)
        if layer is None:
            return self
        lens = constants.get(4)
        full = lens is not None and bool(np.all(lens >= layer.g.steps))
        weights = None
        if all(k in constants for k in [1, 2] + [k for k in (3, _P) if len(ins) > k]):
            args = [constants[1], constants[2], constants.get(3), constants.get(_P)]
            weights = self._on_worker(lambda: layer.prepare(*args), self.small(layer.g))
        return OnednnRecurrent(self.dev, self.name, weights, full)

    def _on_worker(self, fn: Callable[[], Any], small: bool) -> Any:
        """``fn()`` on the host's worker thread (alone where the layer is small), as the layer's calls run."""
        out: list[Any] = []
        call = host_omp.alone(host_dnnl.library(), fn) if small else fn
        self.dev.run(lambda: out.append(call()), [], f"prepare {self.label}").wait()
        return out[0]

    def bind(self, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any) -> Callable[[], None]:
        """The op on these buffers as a call on the host worker."""
        from devicelayer.kernels.op import get

        pool = self.dev.pool
        arrays = [pool._bytes(b)[:t.size * t.dtype.itemsize].view(t.dtype).reshape(t.shape)
                  for b, t in zip((*in_bufs, *out_bufs), (*ins, *outs))]
        values, results = arrays[:len(ins)], arrays[len(ins):]
        numpy = get(self.name).bind_into(values, results, attrs)
        layer = self.route(ins, outs, attrs)
        if layer is None or any(np.may_share_memory(r, v) for r in results for v in values):
            return numpy
        lib = host_dnnl.library()
        call = self._call(layer, values, results, numpy)
        if isinstance(layer, RnnLanes) and host_runner.native(call) is not None:
            # the directions at once: on the worker's team, or alone on the calling thread and a runner helper
            return team_call(call, True, lambda: host_omp.alone(lib, call))
        small = self.small(layer.g)
        return team_call(host_omp.alone(lib, call) if small else call, not small)

    def _call(self, layer: RnnLayer | RnnLanes, values: list[np.ndarray], results: list[np.ndarray],
              numpy: Callable[[], None]) -> Callable[[], None]:
        g = layer.g
        x, y, hn = values[0].ctypes.data, results[0].ctypes.data, results[1].ctypes.data
        h0, c0 = (values[k].ctypes.data if len(values) > k else 0 for k in (_H0, _C0))
        cn = results[2].ctypes.data if len(results) > 2 else 0
        lens = None if self._lens_full or len(values) <= 4 else values[4]
        steps, fixed = g.steps, self._weights
        if fixed is not None and lens is None:  # (constant weights, every sequence whole: bound once)
            return layer.bind(x, h0, c0, fixed, y, hn, cn, keep=(values, results, fixed))
        w, r = values[1], values[2]
        b, p = (values[k] if len(values) > k else None for k in (3, _P))

        def run(keep: Any = (values, results)) -> None:
            if lens is not None and not (lens >= steps).all():
                return numpy()  # (a sequence shorter than the tensor)
            weights = fixed if fixed is not None else layer.prepare(w, r, b, p)
            layer.run(x, h0, c0, weights, y, hn, cn)
        return run

"""Float32 layer normalization on the host through oneDNN's layer normalization primitive.

NumPy's layer normalization is about ten passes (mean, centring, the sum of squares, the inverse deviation,
scale and shift), each a call whose fixed cost is most of the time on a transformer's small rows; oneDNN's is
one JIT kernel.  Float32 tensors with a scale and a shift of one row (the ONNX export's form) run it, seen as
rows of (R, K) over the normalized axes: small ones on the calling thread alone (``eltwise.is_small``), larger
ones on oneDNN's OpenMP team, which the transformer's large products (oneDNN's since the epilogue pass asks the
host's vendor library) keep awake anyway; other dtypes, per-row parameters and the statistics outputs run NumPy.
(Before the large products moved to oneDNN, a layer norm on the team woke it between OpenBLAS products: that
alternation slowed a BERT-mini run 1.7x on the 2-core VM.)
"""

from __future__ import annotations

import math
from typing import Any, Callable

from . import dnnl as host_dnnl, omp as host_omp
from .backend import HostVendor
from .dnnl_layers import LayerNormLayer
from .eltwise import cached_layer, is_small, reference_call
from .stretch import team_call


class OnednnLayerNorm(HostVendor):
    """``layer_normalization`` through oneDNN for float32 tensors whose scale and bias are rows of K elements."""

    def route(self, ins: Any, attrs: dict) -> LayerNormLayer | None:
        """The layer running these inputs (built once per view and parameters), None where NumPy runs them."""
        x = ins[0]
        if x.dtype not in host_dnnl.DTYPES or not x.size or attrs.get("stats") \
                or any(t.dtype != x.dtype for t in ins[1:]):
            return None
        k = math.prod(x.shape[attrs["axis"]:])
        if any(t.size != k for t in ins[1:]):  # (a row broadcast to K, or a parameter per row: NumPy)
            return None
        view, eps = (x.size // k, k), float(attrs["epsilon"])
        return cached_layer(self.dev, (self.name, view, (eps, len(ins))),
                            lambda: LayerNormLayer(view, eps, len(ins) > 1, len(ins) > 2), x.size)

    def accepts(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Float32 tensors with row parameters that oneDNN builds a primitive for."""
        return self.route(ins, attrs) is not None

    def bind(self, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any) -> Callable[[], None]:
        """The op on these buffers as a call on the host worker (NumPy where the output overlaps an input)."""
        pool = self.dev.pool
        views = [pool._bytes(b)[:t.size * t.dtype.itemsize] for b, t in zip(in_bufs, ins)]
        n = ins[0].size * ins[0].dtype.itemsize
        y = pool._bytes(out_bufs[0])[:n]
        layer = self.route(ins, attrs)
        start, stop = y.ctypes.data, y.ctypes.data + n
        if layer is None or any(v.ctypes.data < stop and start < v.ctypes.data + v.nbytes for v in views):
            return reference_call(self.name, [v.view(t.dtype).reshape(t.shape) for v, t in zip(views, ins)],
                                  y.view(ins[0].dtype).reshape(ins[0].shape), attrs)
        px, params, py = views[0].ctypes.data, [v.ctypes.data for v in views[1:]], y.ctypes.data
        call = layer.bind(px, params, py, keep=(views, y))
        small = is_small(ins[0].size)
        return team_call(host_omp.alone(host_dnnl.library(), call) if small else call, not small)

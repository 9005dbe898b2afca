"""Float32 matrix products on the host through oneDNN's sgemm, where oneDNN runs the host's convolutions.

With oneDNN installed the host's float32 ``gemm`` and ``matmul`` run on
oneDNN's threads too, so a model's heavy work stays on one thread pool (see
``host_conv``).  NumPy's products run what sgemm does not express directly
(1-D operands, batches that broadcast, a zero alpha or beta whose NaN
products ONNX keeps) and small products (``NUMPY_MNK`` multiply-adds a
matrix), which NumPy's BLAS runs on the calling thread without waking its
pool, faster than a oneDNN call through ctypes.  A larger product stays on
oneDNN's team even where NumPy alone would be faster: OpenBLAS's threads spin
after their work, and alternating them with oneDNN's team on the same cores
slowed a whole BERT-mini run on the 2-core VM twofold (calls timed alone did
not show it).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from . import dnnl as host_dnnl, omp as host_omp
from .backend import HostVendor
from .conv import small_flops
from .stretch import team_call


#: products of at most this many multiply-adds per matrix run NumPy's matmul (OpenBLAS runs a product of up to
#: 262144 on the calling thread); measured on the 2-core VM: 25x64x64 6.1 against 9.4 us, a batch of four
#: 25x16x25 7.8 against 35.6 us, 64x64x64 11.8 against 14.9 us
NUMPY_MNK = 1 << 18


#: a product reading a B of this many bytes or more runs on the team even when its work is small: a few rows
#: times a large B (a classifier's last layer) are bound by memory, read from it by both cores at twice the rate
#: (measured on the 2-core VM in ShuffleNet-v2, 1 x 1024 x 1000: 234-340 us alone against onnxruntime's 126 us)
SMALL_WEIGHT_BYTES = 1 << 20


class OnednnGemm(HostVendor):
    """``gemm`` and ``matmul`` in float32 through ``dnnl_sgemm``."""

    def accepts(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Float32, non-empty, more than ``NUMPY_MNK`` multiply-adds a matrix; matmul with 2-D-or-more operands
        whose batches match or B is one matrix; gemm with non-zero alpha and (where C is given) beta."""
        if ins[0].dtype not in host_dnnl.DTYPES or any(t.size == 0 for t in (*ins, *outs)):
            return False
        if self.name == "gemm":
            takes = attrs["alpha"] != 0 and (len(ins) == 2 or attrs["beta"] != 0)
            return takes and outs[0].size * self._depth(ins, attrs) > NUMPY_MNK
        a, b = ins[0].shape, ins[1].shape
        if len(a) < 2 or len(b) < 2 or (len(b) > 2 and a[:-2] != b[:-2]):
            return False
        one = outs[0].size if len(b) == 2 else math.prod(outs[0].shape[-2:])  # (B one matrix: one sgemm call)
        return one * self._depth(ins, attrs) > NUMPY_MNK

    def bind(self, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any) -> Callable[[], None]:
        """The product on these buffers as a call on the host worker."""
        pool = self.dev.pool
        views = [pool._bytes(buf) for buf in (*in_bufs, *out_bufs)]
        call = self._call(ins, attrs, views)
        small = 2 * outs[0].size * self._depth(ins, attrs) < small_flops() and ins[1].size * 4 < SMALL_WEIGHT_BYTES
        run = lambda keep=views: call()  # noqa: E731  (the closure holds the arrays until the call ran)
        if small:
            return team_call(host_omp.alone(host_dnnl.library(), run), False)
        # (sgemm sizes its threads by the caller's team at each call: the same call runs alone)
        return team_call(run, True, lambda: host_omp.alone(host_dnnl.library(), run))

    def _depth(self, ins: Any, attrs: dict) -> int:
        """The length of each dot product (K)."""
        if self.name == "gemm":
            return ins[0].shape[0] if attrs["transA"] else ins[0].shape[1]
        return ins[1].shape[-2]

    def _call(self, ins: Any, attrs: dict, views: list[np.ndarray]) -> Callable[[], None]:
        ptr = [v.ctypes.data for v in views]
        y = ptr[-1]
        if self.name == "gemm":
            ta, tb = bool(attrs["transA"]), bool(attrs["transB"])
            (m, k), n = (ins[0].shape[::-1] if ta else ins[0].shape), (ins[1].shape[0] if tb else ins[1].shape[1])
            alpha = float(attrs["alpha"])
            if len(ins) == 2:
                return lambda: host_dnnl.sgemm(ta, tb, m, n, k, alpha, ptr[0], ins[0].shape[1], ptr[1],
                                               ins[1].shape[1], 0.0, y, n)
            beta = float(attrs["beta"])
            c = views[2][:ins[2].size * 4].view(np.float32).reshape(ins[2].shape)
            out = views[-1][:m * n * 4].view(np.float32).reshape(m, n)

            def gemm() -> None:
                np.copyto(out, c)  # C broadcast into Y, then Y = alpha * A B + beta * Y
                host_dnnl.sgemm(ta, tb, m, n, k, alpha, ptr[0], ins[0].shape[1], ptr[1], ins[1].shape[1], beta, y, n)
            return gemm
        a, b = ins[0].shape, ins[1].shape
        k, n = b[-2], b[-1]
        if len(b) == 2:  # every row of every batch of A times one B
            m = math.prod(a[:-1])
            return lambda: host_dnnl.sgemm(False, False, m, n, k, 1.0, ptr[0], k, ptr[1], n, 0.0, y, n)
        m, batches = a[-2], math.prod(a[:-2])

        def batched() -> None:
            for i in range(batches):
                host_dnnl.sgemm(False, False, m, n, k, 1.0, ptr[0] + i * m * k * 4, k, ptr[1] + i * k * n * 4, n,
                                0.0, y + i * m * n * 4, n)
        return batched

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
from typing import Any, Callable, Sequence

import numpy as np

from . import dnnl as host_dnnl, omp as host_omp
from .backend import HostVendor
from .binary import ALGORITHMS as BINARY
from .conv import small_flops
from .dnnl_layers import MatmulLayer
from .eltwise import ALGORITHMS as ELTWISE, NUMPY_AT, STANDALONE, cached_layer, reference_call
from .stretch import team_call


#: products of at most this many multiply-adds per matrix run NumPy's matmul (OpenBLAS runs a product of up to
#: 262144 on the calling thread); measured on the 2-core VM: 25x64x64 6.1 against 9.4 us, a batch of four
#: 25x16x25 7.8 against 35.6 us, 64x64x64 11.8 against 14.9 us
NUMPY_MNK = 1 << 18


#: a product reading a B of this many bytes or more runs on the team even when its work is small: a few rows
#: times a large B (a classifier's last layer) are bound by memory, read from it by both cores at twice the rate
#: (measured on the 2-core VM in ShuffleNet-v2, 1 x 1024 x 1000: 234-340 us alone against onnxruntime's 126 us)
SMALL_WEIGHT_BYTES = 1 << 20


#: unary ops a matmul applies as oneDNN eltwise post-ops: those whose oneDNN form gives NumPy's NaN and infinities
#: (a post-op's input is the product, which no check can read first: not ReLU, nor the ops ``NUMPY_AT`` checks)
POST_ELTWISE = STANDALONE - set(NUMPY_AT)


def post_op(step: tuple, running: int, source: Callable[[int], Any], rank: int) -> tuple[tuple, int | None] | None:
    """One chain step reading the running value (operand ``running``) as a oneDNN post-op on a result of ``rank``
    dimensions, and the operand a binary one reads besides (None for a unary one); None where the step is not
    one: a unary op of ``POST_ELTWISE`` of the running value, or an add, mul, sub or div taking the running value
    once (first where the order matters) and an operand ``source`` gives the float32 type of (None: not one it
    may read)."""
    name, step_attrs, operands = step
    if name in POST_ELTWISE and tuple(operands) == (running,):
        alg, params = ELTWISE[name]
        alpha, beta = params(step_attrs)
        return ("eltwise", alg, float(alpha), float(beta)), None
    if name not in BINARY or len(operands) != 2 or list(operands).count(running) != 1:
        return None
    alg, swaps = BINARY[name]
    other = operands[1] if operands[0] == running else operands[0]
    t = source(other)
    if (operands[1] == running and not swaps) or t is None or t.dtype not in host_dnnl.DTYPES or len(t.shape) > rank:
        return None
    return ("binary", alg, (1,) * (rank - len(t.shape)) + tuple(t.shape)), other


def post_ops(steps: Sequence[tuple], extras: Sequence[Any], rank: int) -> tuple[tuple, tuple[int, ...]] | None:
    """An epilogue's ``steps`` as oneDNN post-ops on a product of ``rank`` dimensions, and the extra input each
    binary post-op reads (0-based); None where a step is not one (``post_op``: each step takes the running value,
    the product, then the step before, once, and nothing but an extra input besides; a chain such as
    x * sigmoid(x), which reads a value twice, keeps NumPy's steps)."""
    n_in = 1 + len(extras)
    post: list[tuple] = []
    reads: list[int] = []
    for k, step in enumerate(steps):
        found = post_op(step, 0 if k == 0 else n_in + k - 1,
                        lambda j: extras[j - 1] if 1 <= j < n_in else None, rank)
        if found is None:
            return None
        post.append(found[0])
        if found[1] is not None:
            reads.append(found[1] - 1)
    return tuple(post), tuple(reads)


class OnednnGemm(HostVendor):
    """``gemm`` and ``matmul`` in float32 through ``dnnl_sgemm``; a small matmul with an epilogue through oneDNN's
    matmul with the epilogue as its post-ops (``post_ops``)."""

    #: a product with an epilogue may be asked for (``accepts`` decides)
    takes_epilogue = True

    def accepts(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Float32, non-empty, more than ``NUMPY_MNK`` multiply-adds a matrix; matmul with 2-D-or-more operands
        whose batches match or B is one matrix; gemm with non-zero alpha and (where C is given) beta.  With an
        epilogue: a matmul small enough to run alone whose epilogue oneDNN applies (``_fused``)."""
        if ins[0].dtype not in host_dnnl.DTYPES or any(t.size == 0 for t in (*ins, *outs)):
            return False
        if attrs.get("epilogue"):
            return self._fused(ins, outs, attrs) is not None
        if self.name == "gemm":
            takes = attrs["alpha"] != 0 and (len(ins) == 2 or attrs["beta"] != 0)
            return takes and outs[0].size * self._depth(ins, attrs) > NUMPY_MNK
        a, b = ins[0].shape, ins[1].shape
        if len(a) < 2 or len(b) < 2 or (len(b) > 2 and a[:-2] != b[:-2]):
            return False
        one = outs[0].size if len(b) == 2 else math.prod(outs[0].shape[-2:])  # (B one matrix: one sgemm call)
        return one * self._depth(ins, attrs) > NUMPY_MNK

    def _fused(self, ins: Any, outs: Any, attrs: dict) -> tuple[MatmulLayer, tuple[int, ...]] | None:
        """The oneDNN matmul computing a matmul and its epilogue (built once per geometry, alone), and the extra
        input each of its binary post-ops reads; None where it does not: gemm, operands of other dtypes or below
        two dimensions, B batched other than A, a product too large to run alone, an epilogue ``post_ops`` does
        not express."""
        n = len(ins) - int(attrs.get("epilogue_inputs", 0))
        if self.name != "matmul" or n != 2 or any(t.dtype not in host_dnnl.DTYPES for t in (*ins, *outs)):
            return None
        a, b, y = ins[0].shape, ins[1].shape, outs[0].shape
        if len(a) < 2 or len(b) < 2 or len(b) > len(a) or (len(b) > 2 and a[:-2] != b[:-2]):
            return None
        if 2 * y[-1] * math.prod(a) >= small_flops() or ins[1].size * 4 >= SMALL_WEIGHT_BYTES:
            return None
        found = post_ops(attrs["epilogue"], ins[n:], len(y))
        if found is None:
            return None
        post, reads = found
        b_full = (1,) * (len(a) - len(b)) + tuple(b)
        layer = cached_layer(self.dev, ("matmul", (tuple(a), b_full, tuple(y), post), ()),
                             lambda: MatmulLayer(a, b_full, y, post), 0)
        return None if layer is None else (layer, reads)

    def bind(self, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any) -> Callable[[], None]:
        """The product on these buffers as a call on the host worker."""
        pool = self.dev.pool
        views = [pool._bytes(buf) for buf in (*in_bufs, *out_bufs)]
        if attrs.get("epilogue"):
            return self._bind_fused(ins, outs, attrs, views)
        call = self._call(ins, attrs, views)
        small = 2 * outs[0].size * self._depth(ins, attrs) < small_flops() and ins[1].size * 4 < SMALL_WEIGHT_BYTES
        run = lambda keep=views: call()  # noqa: E731  (the closure holds the arrays until the call ran)
        if small:
            return team_call(host_omp.alone(host_dnnl.library(), run), False)
        # (sgemm sizes its threads by the caller's team at each call: the same call runs alone)
        return team_call(run, True, lambda: host_omp.alone(host_dnnl.library(), run))

    def _bind_fused(self, ins: Any, outs: Any, attrs: dict, views: list[np.ndarray]) -> Callable[[], None]:
        """A small matmul and its epilogue as one oneDNN call, alone; where the output overlaps an input (an eager
        ``out=`` over the summand: oneDNN reads each operand while it writes Y, NumPy's product would overwrite the
        summand before its step), the op's NumPy reference computed apart and copied in."""
        arrays = [v[:t.size * 4].view(np.float32).reshape(t.shape) for v, t in zip(views, (*ins, *outs))]
        y = arrays[-1]
        fused = self._fused(ins, outs, attrs)
        if fused is None or any(np.may_share_memory(y, x) for x in arrays[:-1]):
            return reference_call(self.name, arrays[:-1], y, attrs)
        layer, reads = fused
        n = len(ins) - int(attrs["epilogue_inputs"])
        extras = arrays[n:-1]
        call = layer.bind(arrays[0].ctypes.data, arrays[1].ctypes.data, y.ctypes.data,
                          [extras[j].ctypes.data for j in reads], keep=views)
        return team_call(host_omp.alone(host_dnnl.library(), call), False)

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

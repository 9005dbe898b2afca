"""matmul and gemm on CUDA devices through cuBLAS: each product geometry tuned once, when a plan is made.

cuBLASLt's heuristic candidates for the product (with ONNX Gemm's bias row, where it has one and beta is 1, added
by the product's epilogue in the same launch) are timed against cuBLAS's default product (with the bias added by
a kernel of its own after it) on scratch buffers, as a captured CUDA graph so that only GPU time counts, and the
fastest runs the geometry from then on. The choice is kept in the disk cache (``devicelayer.tuning``) with the
cuBLASLt version it was made with, so a later process on the same GPU, driver and libraries takes it without
timing. Products cuBLASLt does not describe here (broadcast batches, misaligned operands at run time) take
cuBLAS's default product.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import cupy
import numpy as np

from . import blas as cuda_blas, blaslt
from devicelayer.errors import LaunchError

from .backend import _cupy_view, _Vendor
from .timing import gpu_ms, scratch

#: the disk cache's kind for product choices
TUNED_KIND = "gemm-lt-1"
_AXPBY: dict[bool, Any] = {}


def _axpby(double: bool) -> Any:
    """y = alpha * y + beta * c, c broadcast to y (ONNX Gemm's C term after the product), in float64 for
    float64 and float32 otherwise."""
    if double not in _AXPBY:
        acc, scalar = ("double", "float64") if double else ("float", "float32")
        _AXPBY[double] = cupy.ElementwiseKernel(
            f"T c, {scalar} alpha, {scalar} beta", "T y", f"y = (T)(alpha * ({acc})y + beta * ({acc})c)",
            f"devicelayer_gemm_axpby_{acc}")
    return _AXPBY[double]


@dataclass(frozen=True)
class Tail:
    """What follows the product in the same call: a bias row added, a summand of the output's shape added (times
    ``beta``), an activation last, ReLU or GELU's tanh form (cuBLASLt's epilogue and C term take them all); or,
    ``c_after``, Gemm's C term added by a kernel of its own (a C of another shape, a bias row under beta other than
    1). Indices are of the call's inputs."""

    bias: int | None = None
    summand: int | None = None
    beta: float = 1.0
    activation: str | None = None
    c_after: bool = False


_GELU: dict[bool, Any] = {}


def _gelu_tanh(double: bool) -> Any:
    """GELU's tanh form in place, 0.5 y (1 + tanh(sqrt(2 / pi) (y + 0.044715 y^3))), in float64 for float64."""
    if double not in _GELU:
        acc = "double" if double else "float"
        _GELU[double] = cupy.ElementwiseKernel(
            "T x", "T y", f"{acc} v = ({acc})x; y = (T)(({acc})0.5 * v * (({acc})1 + tanh(({acc})0.7978845608028654 "
            f"* (v + ({acc})0.044715 * v * v * v))))", f"devicelayer_gemm_gelu_tanh_{acc}")
    return _GELU[double]


def _row(t: Any, n: int) -> bool:
    """Whether ``t`` is a row of ``n`` elements (any leading dimensions of 1)."""
    return t.size == n and len(t.shape) >= 1 and t.shape[-1] == n


def tail_of(name: str, ins: Any, outs: Any, attrs: dict) -> Tail | None:
    """The call's tail (Gemm's C term and the epilogue the plan gave the product, ``kernels/ops/epilogue.py``);
    None where it holds a step cuBLASLt does not take (the op's kernels run such a call)."""
    extra = int(attrs.get("epilogue_inputs", 0) or 0)
    own = len(ins) - extra
    out = outs[0]
    n = out.shape[-1] if out.shape else 1
    bias = summand = None
    beta, c_after = 1.0, False
    if name == "gemm" and own == 3:
        beta = float(attrs.get("beta", 1.0))
        if _row(ins[2], n) and beta == 1.0:
            bias = 2
        elif tuple(ins[2].shape) == tuple(out.shape):
            summand = 2
        else:
            c_after = True
    activation = None
    cur = 0  # the operand slot of the value so far (0: the product)
    for k, (op, _, slots) in enumerate(attrs.get("epilogue") or ()):
        if c_after or activation:
            return None
        if op in blaslt.ACTIVATIONS and tuple(slots) == (cur,):
            activation = op
        elif op == "add" and len(slots) == 2 and cur in slots and slots[0] != slots[1]:
            other = slots[1] if slots[0] == cur else slots[0]
            if not 1 <= other <= extra:
                return None
            index = own + other - 1
            t = ins[index]
            if t.dtype != out.dtype:
                return None
            if bias is None and _row(t, n):
                bias = index
            elif summand is None and tuple(t.shape) == tuple(out.shape):
                summand = index
            else:
                return None
        else:
            return None
        cur = extra + 1 + k
    return Tail(bias, summand, beta, activation, c_after)


def geometry(name: str, ins: Any, attrs: dict) -> tuple | None:
    """(trans_a, trans_b, m, n, k, batch, strides of A, B and D) of a product cuBLASLt can describe as one
    strided batch, None otherwise."""
    if name == "gemm":
        ta, tb = bool(attrs["transA"]), bool(attrs["transB"])
        (m, k), n = (ins[0].shape[::-1] if ta else ins[0].shape), (ins[1].shape[0] if tb else ins[1].shape[1])
        return (ta, tb, m, n, k, 1, (0, 0, 0))
    a_shape, b_shape = tuple(ins[0].shape), tuple(ins[1].shape)
    a_shape = (1,) + a_shape if len(a_shape) == 1 else a_shape
    b_shape = b_shape + (1,) if len(b_shape) == 1 else b_shape
    (m, k), n = a_shape[-2:], b_shape[-1]
    ba, bb = a_shape[:-2], b_shape[:-2]
    bc = tuple(np.broadcast_shapes(ba, bb))
    ba, bb = (1,) * (len(bc) - len(ba)) + ba, (1,) * (len(bc) - len(bb)) + bb
    count = math.prod(bc)
    if ba == bc and math.prod(bb) == 1:  # A's batches fold into its rows
        return (False, False, count * m, n, k, 1, (0, 0, 0))
    if ba == bc and bb == bc:
        return (False, False, m, n, k, count, (m * k, k * n, m * n))
    return None


class VendorGemm(_Vendor):
    """matmul / gemm through cuBLASLt's fastest candidate or cuBLAS's default product, tuned per geometry; a bias
    row, a summand and a ReLU or GELU (tanh form) after the product (Gemm's C, the epilogue a plan gives it) in the
    same call."""

    #: a product with an epilogue may be asked for (``accepts`` decides)
    takes_epilogue = True
    #: a plan gives a product this op takes the chain after it, where ``accepts`` takes that (one launch)
    prefers_epilogue = True

    def accepts(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Floating-point products of non-empty operands (integer ones use the op's kernels) whose epilogue, if
        any, is one the call applies (``tail_of``); the geometry is tuned here, once."""
        ok = (ins[0].dtype in cuda_blas.DTYPES and all(t.size > 0 for t in (*ins, *outs))
              and tail_of(self.name, ins, outs, attrs) is not None)
        if ok:
            self.route(ins, outs, attrs)
        return ok

    def describe(self, ins: Any, outs: Any, attrs: dict) -> str:
        """How the product runs: cuBLASLt's candidate (its rank in the heuristic) or cuBLAS's default."""
        product, choice = self.route(ins, outs, attrs, tune=False)
        return f"cuBLASLt candidate {choice}" if product is not None else "cuBLAS"

    def _key(self, ins: Any, attrs: dict, shape: tuple, tail: Tail) -> tuple:
        return (self.name, str(ins[0].dtype), shape, (tail.bias is not None, tail.summand is not None, tail.activation),
                bool(attrs.get("allow_tf32")))

    def route(self, ins: Any, outs: Any, attrs: dict, tune: bool = True) -> tuple[Any, int]:
        """(cuBLASLt product, its candidate) or (None, 0) for cuBLAS's default product; decided once per geometry
        (``tune``: time it where nothing is stored)."""
        shape, tail = geometry(self.name, ins, attrs), tail_of(self.name, ins, outs, attrs)
        if shape is None or tail is None:
            return (None, 0)
        key = self._key(ins, attrs, shape, tail)
        routes = self.dev._gemm_routes
        found = routes.get(key)
        if found is not None:
            return found
        lt = self.dev._lt()
        if lt is None:
            return (None, 0)
        try:
            product = lt.product(ins[0].dtype, *shape, bias=tail.bias is not None, summand=tail.summand is not None,
                                 activation=tail.activation, tf32=bool(attrs.get("allow_tf32")))
        except blaslt.LtError:
            product = None
        if product is None or not product.candidates:
            found = (None, 0)
        else:
            found = self._stored(repr(key), product, lt)
            if found is None:
                if not tune:
                    return (None, 0)
                try:
                    found = self._tune(repr(key), ins, outs, attrs, product, lt, tail)
                except (cupy.cuda.memory.OutOfMemoryError, LaunchError, blaslt.LtError):
                    return (None, 0)  # (no room for scratch buffers, or a failed call: cuBLAS's default, not kept; a
                    # device a sticky error broke reports it at its next call)
        routes[key] = found
        return found

    def _stored(self, key: str, product: Any, lt: Any) -> tuple[Any, int] | None:
        """The choice an earlier process measured with this cuBLASLt version: its candidate, found by its
        description, else by its rank in the heuristic (every candidate computes the product: a rank that names
        another one costs speed, not correctness)."""
        stored = self.dev._tuned(TUNED_KIND).get(key)
        if not isinstance(stored, dict) or stored.get("version") != lt.version:
            return None
        if stored.get("how") == "cublas":
            return (None, 0)
        choice = product.find(stored.get("algo"))
        rank = stored.get("rank")
        if choice is None and isinstance(rank, int) and not isinstance(rank, bool) and 0 <= rank < len(
                product.candidates):
            choice = rank
        return (product, choice) if choice is not None else None

    def _tune(self, key: str, ins: Any, outs: Any, attrs: dict, product: Any, lt: Any,
              tail: Tail) -> tuple[Any, int]:
        """Time cuBLAS's default product and every cuBLASLt candidate on scratch buffers; keep the fastest."""
        dev = self.dev
        times: dict[str, float] = {}
        with dev._enter(f"tune {self.label}"), cupy.cuda.using_allocator(dev.pool.cupy_pool.malloc):
            stream = cupy.cuda.Stream(non_blocking=True)
            with stream:
                arrays, y = scratch(ins, outs)
                times["cublas"] = gpu_ms(stream, lambda: self._default(stream, ins, attrs, tail, arrays, y))
                for i in range(len(product.candidates)):
                    def run(i: int = i) -> None:
                        if not self._lt_call(stream, product, i, ins, attrs, tail, arrays, y):
                            raise blaslt.LtError("refused")
                    try:
                        times[f"lt {i}"] = gpu_ms(stream, run)
                    except (blaslt.LtError, cupy.cuda.runtime.CUDARuntimeError):
                        continue
            stream.synchronize()
        best = min(times, key=times.__getitem__)
        measured = {k: round(v, 5) for k, v in times.items()}
        if best == "cublas":
            dev._tuned(TUNED_KIND).put(key, {"how": "cublas", "version": lt.version, "times_ms": measured})
            return (None, 0)
        choice = int(best.split()[1])
        dev._tuned(TUNED_KIND).put(key, {"how": "lt", "algo": product.signature(choice), "rank": choice,
                                         "version": lt.version, "times_ms": measured})
        return (product, choice)

    def _alpha(self, attrs: dict) -> float:
        return float(attrs.get("alpha", 1.0)) if self.name == "gemm" else 1.0

    def _lt_call(self, stream: Any, product: Any, choice: int, ins: Any, attrs: dict, tail: Tail,
                 arrays: Any, y: Any) -> bool:
        """Queue the call through cuBLASLt candidate ``choice`` (``arrays``: the inputs as CuPy arrays)."""
        ptr = [x.data.ptr for x in arrays]
        if not product.run(stream.ptr, ptr[0], ptr[1], y.data.ptr, ptr[tail.bias] if tail.bias is not None else 0,
                           choice, self._alpha(attrs),
                           ptr[tail.summand] if tail.summand is not None else 0, tail.beta):
            return False
        if tail.c_after:
            with stream:
                _axpby(y.dtype == np.float64)(arrays[2], *self._scalars(y.dtype, 1.0, tail.beta), y)
        return True

    def _default(self, stream: Any, ins: Any, attrs: dict, tail: Tail, arrays: Any, y: Any) -> None:
        """The call through cuBLAS's default product, its tail by kernels after it (``arrays``: CuPy inputs)."""
        self._blas_product(stream, ins, attrs, arrays[0].data.ptr, arrays[1].data.ptr, y.data.ptr, y.dtype)
        with stream:
            add = _axpby(y.dtype == np.float64)
            if tail.c_after:
                add(arrays[2], *self._scalars(y.dtype, 1.0, tail.beta), y)
            for index, beta in ((tail.bias, 1.0), (tail.summand, tail.beta)):
                if index is not None:
                    add(arrays[index], *self._scalars(y.dtype, 1.0, beta), y)
            if tail.activation == "relu":
                cupy.maximum(y, 0, out=y)
            elif tail.activation == "gelu_tanh":
                _gelu_tanh(y.dtype == np.float64)(y, y)

    @staticmethod
    def _scalars(dtype: np.dtype, alpha: float, beta: float) -> tuple[Any, Any]:
        scalar = np.float64 if dtype == np.float64 else np.float32
        return scalar(alpha), scalar(beta)

    def _blas_product(self, stream: Any, ins: Any, attrs: dict, a: int, b: int, y: int, dtype: np.dtype) -> None:
        """alpha op(A) op(B) into y through cuBLAS's default product."""
        blas = self.dev._blas()
        tf32 = bool(attrs.get("allow_tf32"))
        if self.name == "matmul":
            cuda_blas.matmul(blas, stream.ptr, dtype, ins[0].shape, ins[1].shape, a, b, y, tf32)
            return
        ta, tb = attrs["transA"], attrs["transB"]
        (m, k), n = (ins[0].shape[::-1] if ta else ins[0].shape), (ins[1].shape[0] if tb else ins[1].shape[1])
        blas.gemm(stream.ptr, dtype, ta, tb, m, n, k, self._alpha(attrs), a, m if ta else k, 0, b, k if tb else n, 0,
                  0.0, y, n, 0, 1, tf32)

    def enqueue(self, stream: Any, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any) -> None:
        """Queue the call on ``stream`` (the device is current)."""
        tail = tail_of(self.name, ins, outs, attrs)
        if tail is None:
            raise LaunchError(f"{self.label}: an epilogue cuBLASLt does not apply")
        index = self.dev.index
        arrays = [_cupy_view(buf, t, index) for buf, t in zip(in_bufs, ins)]
        y = _cupy_view(out_bufs[0], outs[0], index)
        product, choice = self.route(ins, outs, attrs, tune=False)
        if product is not None and self._lt_call(stream, product, choice, ins, attrs, tail, arrays, y):
            return
        self._default(stream, ins, attrs, tail, arrays, y)

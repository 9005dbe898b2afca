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
from typing import Any, Callable

import cupy
import numpy as np

from . import blas as cuda_blas, blaslt
from devicelayer.errors import LaunchError

from .backend import _address, _cupy_view, _Vendor
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


def gemm_dims(ins: Any, attrs: dict) -> tuple[bool, bool, int, int, int]:
    """(trans_a, trans_b, m, n, k) of an ONNX Gemm."""
    ta, tb = bool(attrs["transA"]), bool(attrs["transB"])
    (m, k), n = (ins[0].shape[::-1] if ta else ins[0].shape), (ins[1].shape[0] if tb else ins[1].shape[1])
    return ta, tb, m, n, k


def geometry(name: str, ins: Any, attrs: dict) -> tuple | None:
    """(trans_a, trans_b, m, n, k, batch, strides of A, B and D) of a product cuBLASLt can describe as one
    strided batch, None otherwise."""
    if name == "gemm":
        return (*gemm_dims(ins, attrs), 1, (0, 0, 0))
    m, k, n, ba, bb, bc = cuda_blas.batches(ins[0].shape, ins[1].shape)
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
        """The choice an earlier process measured with this cuBLASLt version (``Product.recall``)."""
        stored = self.dev._tuned(TUNED_KIND).get(key)
        if not isinstance(stored, dict) or stored.get("version") != lt.version:
            return None
        if stored.get("how") == "cublas":
            return (None, 0)
        choice = product.recall(stored)
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
                ptrs, d = [x.data.ptr for x in arrays], y.data.ptr
                times["cublas"] = gpu_ms(stream, lambda: self._call(stream, ins, attrs, tail, (None, 0), ptrs, d,
                                                                    lambda: (arrays, y)))
                for i in range(len(product.candidates)):
                    def run(i: int = i) -> None:
                        if not self._lt_call(stream, product, i, attrs, tail, ptrs, d):
                            raise blaslt.LtError("refused")
                        if tail.c_after:
                            self._after(stream, tail, arrays, y, True)
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
        dev._tuned(TUNED_KIND).put(key, {"how": "lt", **product.record(choice), "times_ms": measured})
        return (product, choice)

    def _alpha(self, attrs: dict) -> float:
        return float(attrs.get("alpha", 1.0)) if self.name == "gemm" else 1.0

    def _lt_call(self, stream: Any, product: Any, choice: int, attrs: dict, tail: Tail, ptrs: list[int],
                 y: int) -> bool:
        """Queue the product and what cuBLASLt applies of the tail through candidate ``choice`` (``ptrs``: the
        inputs' device addresses); False where it refused (nothing queued)."""
        return product.run(stream.ptr, ptrs[0], ptrs[1], y, ptrs[tail.bias] if tail.bias is not None else 0, choice,
                           self._alpha(attrs), ptrs[tail.summand] if tail.summand is not None else 0, tail.beta)

    def _default(self, stream: Any, ins: Any, attrs: dict, ptrs: list[int], y: int) -> None:
        """The product through cuBLAS's default (``ptrs``: the inputs' device addresses)."""
        blas, dtype = self.dev._blas(), ins[0].dtype
        tf32 = bool(attrs.get("allow_tf32"))
        if self.name == "matmul":
            cuda_blas.matmul(blas, stream.ptr, dtype, ins[0].shape, ins[1].shape, ptrs[0], ptrs[1], y, tf32)
            return
        ta, tb, m, n, k = gemm_dims(ins, attrs)
        blas.gemm(stream.ptr, dtype, ta, tb, m, n, k, self._alpha(attrs), ptrs[0], m if ta else k, 0, ptrs[1],
                  k if tb else n, 0, 0.0, y, n, 0, 1, tf32)

    @staticmethod
    def _after(stream: Any, tail: Tail, arrays: Any, y: Any, applied: bool) -> None:
        """The kernels after the product (``arrays``, ``y``: CuPy views of the inputs and the output): Gemm's C term
        where cuBLASLt cannot take it, and the rest of the tail unless cuBLASLt ``applied`` it."""
        steps = [(2, tail.beta)] if tail.c_after else []
        if not applied:
            steps += [(i, beta) for i, beta in ((tail.bias, 1.0), (tail.summand, tail.beta)) if i is not None]
        double = y.dtype == np.float64
        scalar = np.float64 if double else np.float32
        with stream:
            for index, beta in steps:
                _axpby(double)(arrays[index], scalar(1.0), scalar(beta), y)
            if not applied and tail.activation == "relu":
                cupy.maximum(y, 0, out=y)
            elif not applied and tail.activation == "gelu_tanh":
                _gelu_tanh(double)(y, y)

    def _call(self, stream: Any, ins: Any, attrs: dict, tail: Tail, route: tuple[Any, int], ptrs: list[int], y: int,
              views: Callable[[], tuple[list[Any], Any]]) -> None:
        """Queue the whole call: through cuBLASLt on ``route`` where it is one and takes the call, else cuBLAS's
        default; then the kernels after it (``views()``: CuPy views of the inputs and the output, made only if
        a kernel needs them)."""
        product, choice = route
        applied = product is not None and self._lt_call(stream, product, choice, attrs, tail, ptrs, y)
        if not applied:
            self._default(stream, ins, attrs, ptrs, y)
        if tail.c_after or (not applied and (tail.bias is not None or tail.summand is not None or tail.activation)):
            self._after(stream, tail, *views(), applied)

    def enqueue(self, stream: Any, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any) -> None:
        """Queue the call on ``stream`` (the device is current)."""
        tail = tail_of(self.name, ins, outs, attrs)
        if tail is None:
            raise LaunchError(f"{self.label}: an epilogue cuBLASLt does not apply")
        index = self.dev.index

        def views() -> tuple[list[Any], Any]:
            return ([_cupy_view(buf, t, index) for buf, t in zip(in_bufs, ins)],
                    _cupy_view(out_bufs[0], outs[0], index))
        self._call(stream, ins, attrs, tail, self.route(ins, outs, attrs, tune=False),
                   [_address(b) for b in in_bufs], _address(out_bufs[0]), views)

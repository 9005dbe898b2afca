"""cuBLASLt matrix products for the CUDA backend: a product described once (its descriptors and cuBLASLt's
heuristic candidates for it), then run on any stream, stream capture included, with the candidate chosen.

Row-major arrays map onto cuBLASLt's column-major convention as in ``blas`` (Y^T = B^T A^T). A bias row (ONNX
Gemm's C of shape (n,) or (1, n), or an Add after a MatMul) and a ReLU or GELU are the product's epilogue, a
summand of the output's shape its C term: all in the same launch.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

from .blas import _COMPUTE_32F, _COMPUTE_32F_FAST_TF32, _COMPUTE_64F, _DATA, _OP_N, _OP_T, loaded

_R_32F, _R_64F = 0, 1  # cudaDataType of the scale (alpha, beta)
_DESC_TRANSA, _DESC_TRANSB, _DESC_EPILOGUE, _DESC_BIAS_POINTER = 3, 4, 7, 8  # cublasLtMatmulDescAttributes_t
_LAYOUT_BATCH_COUNT, _LAYOUT_BATCH_STRIDE = 5, 6  # cublasLtMatrixLayoutAttribute_t
_PREF_MAX_WORKSPACE = 1  # cublasLtMatmulPreferenceAttributes_t
_EPILOGUE_BIAS = 4  # cublasLtEpilogue_t: flags, RELU_BIAS is 6 and GELU_BIAS 36
#: the activations a product's epilogue applies last (GELU's is its tanh form), as op names and epilogue flags
ACTIVATIONS = {"relu": 2, "gelu_tanh": 32}
#: heuristic candidates asked for per product
CANDIDATES = 8
#: pointer alignment (bytes) the candidates are chosen for; a call with a less aligned operand uses ``blas``
ALIGNMENT = 16


class _Algo(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64 * 8)]


class _Heuristic(ctypes.Structure):
    _fields_ = [("algo", _Algo), ("workspace", ctypes.c_size_t), ("state", ctypes.c_int), ("waves", ctypes.c_float),
                ("reserved", ctypes.c_int * 4)]


def _library() -> ctypes.CDLL | None:
    """The libcublasLt this process loaded with cuBLAS (its mappings), else the one the loader finds."""
    return loaded("cublasLt", "cublasLtMatmulAlgoGetHeuristic")


_LIB: list = []


def library() -> ctypes.CDLL | None:
    """The cuBLASLt library (looked up once, after cuBLAS is loaded)."""
    if not _LIB:
        from .blas import library as cublas

        cublas()  # (cuBLAS loads the cuBLASLt it was built with)
        _LIB.append(_library())
    return _LIB[0]


class LtError(RuntimeError):
    """A cuBLASLt call failed (its status in the message)."""


def _check(status: int, what: str) -> None:
    if status:
        raise LtError(f"{what} failed with cuBLAS status {status}")


class Lt:
    """One cuBLASLt handle of one device and the workspace its products share."""

    def __init__(self, lib: ctypes.CDLL, workspace: Any, workspace_bytes: int) -> None:
        self.lib = lib
        self._workspace = workspace  # (device memory kept for the handle's life: capture must not allocate)
        self.lock = threading.Lock()
        handle = ctypes.c_void_p()
        _check(lib.cublasLtCreate(ctypes.byref(handle)), "cublasLtCreate")
        self.handle = handle
        self.workspace, self.workspace_bytes = int(workspace.ptr), workspace_bytes
        self.version = int(ctypes.c_size_t(lib.cublasLtGetVersion()).value) if hasattr(lib, "cublasLtGetVersion") \
            else 0
        lib.cublasLtMatmul.argtypes = [ctypes.c_void_p] * 13 + [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]

    def product(self, dtype: np.dtype, trans_a: bool, trans_b: bool, m: int, n: int, k: int, batch: int = 1,
                strides: tuple[int, int, int] = (0, 0, 0), bias: bool = False, summand: bool = False,
                activation: str | None = None, tf32: bool = False) -> "Product":
        """Row-major D (m, n) = act(alpha op(A) (m, k) @ op(B) (k, n) [+ beta C (m, n)] [+ a bias row of n]),
        ``batch`` times (strides of A, B and D in elements; C as D; ``activation`` one of ``ACTIVATIONS``)."""
        return Product(self, np.dtype(dtype), trans_a, trans_b, m, n, k, batch, strides, bias, summand, activation,
                       tf32)


class Product:
    """A described product: its descriptors and cuBLASLt's heuristic candidates (``candidates``, best first)."""

    def __init__(self, lt: Lt, dtype: np.dtype, trans_a: bool, trans_b: bool, m: int, n: int, k: int, batch: int,
                 strides: tuple[int, int, int], bias: bool, summand: bool, activation: str | None,
                 tf32: bool) -> None:
        self.lt, self.bias, self.summand = lt, bias, summand
        lib = lt.lib
        double = dtype == np.float64
        compute = _COMPUTE_64F if double else _COMPUTE_32F_FAST_TF32 if tf32 and dtype == np.float32 else _COMPUTE_32F
        self.scalars = np.array([1.0, 0.0], np.float64 if double else np.float32)
        self._made: list[tuple[Any, ctypes.c_void_p]] = []
        self.desc = self._make(lib.cublasLtMatmulDescCreate, lib.cublasLtMatmulDescDestroy, ctypes.c_int(compute),
                               ctypes.c_int(_R_64F if double else _R_32F))
        # column-major: the first operand is B (n x k, op as trans_b), the second A (k x m, op as trans_a)
        self._attr(_DESC_TRANSA, ctypes.c_int(_OP_T if trans_b else _OP_N))
        self._attr(_DESC_TRANSB, ctypes.c_int(_OP_T if trans_a else _OP_N))
        epilogue = (_EPILOGUE_BIAS if bias else 0) | ACTIVATIONS.get(activation or "", 0)
        if epilogue:
            self._attr(_DESC_EPILOGUE, ctypes.c_uint32(epilogue))
        t = _DATA[dtype]
        sa, sb, sd = strides
        self.first = self._layout(t, (k, n) if trans_b else (n, k), batch, sb)
        self.second = self._layout(t, (m, k) if trans_a else (k, m), batch, sa)
        self.out = self._layout(t, (n, m), batch, sd)
        self.candidates = self._heuristics()

    def _make(self, create: Any, destroy: Any, *args: Any) -> ctypes.c_void_p:
        obj = ctypes.c_void_p()
        _check(create(ctypes.byref(obj), *args), create.__name__)
        self._made.append((destroy, obj))
        return obj

    def _attr(self, attr: int, value: Any, desc: Any = None) -> None:
        _check(self.lt.lib.cublasLtMatmulDescSetAttribute(desc or self.desc, ctypes.c_int(attr), ctypes.byref(value),
                                                          ctypes.c_size_t(ctypes.sizeof(value))),
               "cublasLtMatmulDescSetAttribute")

    def _layout(self, t: int, rows_cols: tuple[int, int], batch: int, stride: int) -> ctypes.c_void_p:
        lib = self.lt.lib
        rows, cols = rows_cols
        layout = self._make(lib.cublasLtMatrixLayoutCreate, lib.cublasLtMatrixLayoutDestroy, ctypes.c_int(t),
                            ctypes.c_uint64(rows), ctypes.c_uint64(cols), ctypes.c_int64(max(rows, 1)))
        if batch > 1:
            for attr, value in ((_LAYOUT_BATCH_COUNT, ctypes.c_int32(batch)),
                                (_LAYOUT_BATCH_STRIDE, ctypes.c_int64(stride))):
                _check(lib.cublasLtMatrixLayoutSetAttribute(layout, ctypes.c_int(attr), ctypes.byref(value),
                                                            ctypes.c_size_t(ctypes.sizeof(value))),
                       "cublasLtMatrixLayoutSetAttribute")
        return layout

    def _heuristics(self) -> list[_Algo]:
        """cuBLASLt's candidates for this product within the workspace, best first (empty where it has none)."""
        lib = self.lt.lib
        pref = self._make(lib.cublasLtMatmulPreferenceCreate, lib.cublasLtMatmulPreferenceDestroy)
        size = ctypes.c_uint64(self.lt.workspace_bytes)
        _check(lib.cublasLtMatmulPreferenceSetAttribute(pref, ctypes.c_int(_PREF_MAX_WORKSPACE), ctypes.byref(size),
                                                        ctypes.c_size_t(8)), "cublasLtMatmulPreferenceSetAttribute")
        results = (_Heuristic * CANDIDATES)()
        count = ctypes.c_int(0)
        status = lib.cublasLtMatmulAlgoGetHeuristic(self.lt.handle, self.desc, self.first, self.second, self.out,
                                                    self.out, pref, ctypes.c_int(CANDIDATES), results,
                                                    ctypes.byref(count))
        if status:
            return []
        return [_Algo.from_buffer_copy(r.algo) for r in results[:count.value]
                if r.state == 0 and r.workspace <= self.lt.workspace_bytes]

    def run(self, stream: int, a: int, b: int, d: int, bias: int = 0, choice: int = 0, alpha: float = 1.0,
            c: int = 0, beta: float = 1.0) -> bool:
        """Queue D = alpha A @ B [+ beta C] [+ bias] [then ReLU] on ``stream`` with candidate ``choice``; False
        (nothing queued) where an operand is less aligned than the candidates were chosen for, or cuBLASLt refuses
        the call."""
        if not self.summand:
            c, beta = d, 0.0
        if choice >= len(self.candidates) or any(p % ALIGNMENT for p in (a, b, c, d, bias)):
            return False
        lt = self.lt
        with lt.lock:
            if self.bias:
                self._attr(_DESC_BIAS_POINTER, ctypes.c_void_p(bias))
            self.scalars[:] = alpha, beta  # (read when the call is made: a captured call keeps their values)
            s = self.scalars.ctypes.data
            status = lt.lib.cublasLtMatmul(
                lt.handle, self.desc, ctypes.c_void_p(s), ctypes.c_void_p(b), self.first, ctypes.c_void_p(a),
                self.second, ctypes.c_void_p(s + self.scalars.itemsize), ctypes.c_void_p(c), self.out,
                ctypes.c_void_p(d), self.out, ctypes.byref(self.candidates[choice]),
                ctypes.c_void_p(lt.workspace), ctypes.c_size_t(lt.workspace_bytes), ctypes.c_void_p(stream))
        return status == 0

    def signature(self, choice: int) -> list[int]:
        """Candidate ``choice`` as integers (kept in the disk cache, matched against a later process's candidates)."""
        return [int(x) for x in self.candidates[choice].data]

    def find(self, signature: Any) -> int | None:
        """The index of the candidate with this ``signature``, None where none has it."""
        for i, algo in enumerate(self.candidates):
            if [int(x) for x in algo.data] == signature:
                return i
        return None

    def record(self, choice: int) -> dict[str, Any]:
        """What the disk cache keeps of candidate ``choice``: its description, its rank, this cuBLASLt version."""
        return {"algo": self.signature(choice), "rank": choice, "version": self.lt.version}

    def recall(self, stored: Any) -> int | None:
        """The candidate a ``record`` names, where it was made with this cuBLASLt version: found by its description,
        else by its rank in the heuristic (every candidate computes the product: a rank that names another one
        costs speed, not correctness); None where it names none."""
        if not isinstance(stored, dict) or stored.get("version") != self.lt.version:
            return None
        choice, rank = self.find(stored.get("algo")), stored.get("rank")
        if choice is None and isinstance(rank, int) and not isinstance(rank, bool) and 0 <= rank < len(
                self.candidates):
            choice = rank
        return choice

    def __del__(self) -> None:
        for destroy, obj in reversed(getattr(self, "_made", [])):
            try:
                destroy(obj)
            except Exception:  # noqa: BLE001 - at interpreter exit the library may be gone
                pass

"""cuBLAS matrix products for the CUDA backend, callable on any stream, stream capture included.

CuPy's own cuBLAS wrappers refuse to run while a stream is being captured, so
plans recorded as CUDA graphs call the same cuBLAS library CuPy loaded through
a handle of our own: one ``cublasGemmStridedBatchedEx`` per product (a batch of
one for a plain product), row-major arrays mapped onto cuBLAS's column-major
convention (Y^T = B^T A^T).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import itertools
import math
import threading
from typing import Any

import numpy as np

from devicelayer.dtypes import EXTRA

#: bfloat16 (ml_dtypes'), where installed
BFLOAT16 = EXTRA.get("bfloat16")
#: the 16-bit floats, which the vendor libraries and the tensor cores take with float32 accumulation
HALVES = frozenset({np.dtype(np.float16)} | ({BFLOAT16} if BFLOAT16 is not None else set()))
_DATA = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.float16): 2,  # cudaDataType
         **({BFLOAT16: 14} if BFLOAT16 is not None else {})}
DTYPES = frozenset(_DATA)  # what the products take
_COMPUTE_32F, _COMPUTE_64F, _COMPUTE_32F_FAST_TF32 = 68, 70, 77  # cublasComputeType_t
_OP_N, _OP_T = 0, 1
WORKSPACE = 32 << 20


def loaded(stem: str, symbol: str) -> ctypes.CDLL | None:
    """``lib<stem>.so`` as this process mapped it (the one CuPy's libraries use), else the one the loader finds
    (CUDA 13's or 12's), where it has ``symbol``; None where none does."""
    name = f"lib{stem}.so"
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if line.split()[-1].rpartition("/")[2].startswith(name)}
    except OSError:
        paths = set()
    for path in sorted(paths) + [ctypes.util.find_library(stem) or "", f"{name}.13", f"{name}.12"]:
        if not path:
            continue
        try:
            lib = ctypes.CDLL(path)
            getattr(lib, symbol)  # (present?)
            return lib
        except (OSError, AttributeError):
            continue
    return None


def _library() -> ctypes.CDLL | None:
    """The libcublas CuPy uses (found in this process's mappings), else the one the loader finds."""
    try:
        import cupy_backends.cuda.libs.cublas as _loads_libcublas  # noqa: F401
    except ImportError:
        pass
    return loaded("cublas", "cublasGemmStridedBatchedEx")


class Blas:
    """One cuBLAS handle of one device, used under a lock (cuBLAS handles are not thread-safe)."""

    def __init__(self, lib: ctypes.CDLL, workspace: Any) -> None:
        self.lib = lib
        self.lock = threading.Lock()
        handle = ctypes.c_void_p()
        status = lib.cublasCreate_v2(ctypes.byref(handle))
        if status:
            raise RuntimeError(f"cublasCreate failed with status {status}")
        self.handle = handle
        self.workspace = workspace  # device memory kept for the handle's life (capture must not allocate)
        f = lib.cublasGemmStridedBatchedEx
        f.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_longlong,
                      ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_longlong,
                      ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_longlong,
                      ctypes.c_int, ctypes.c_int, ctypes.c_int]
        self._gemm = f
        self._set_workspace = getattr(lib, "cublasSetWorkspace_v2", None)

    def gemm(self, stream: int, dtype: np.dtype, trans_a: bool, trans_b: bool, m: int, n: int, k: int,
             alpha: float, a: int, lda: int, stride_a: int, b: int, ldb: int, stride_b: int, beta: float,
             c: int, ldc: int, stride_c: int, batch: int, tf32: bool = False) -> None:
        """Row-major C (m, n) = alpha op(A) (m, k) @ op(B) (k, n) + beta C, ``batch`` times (strides in elements);
        ``tf32``: float32 products may run TF32 on tensor cores (else IEEE float32)."""
        scalar = np.array([alpha, beta], np.float64 if dtype == np.float64 else np.float32)
        compute = (_COMPUTE_64F if dtype == np.float64 else
                   _COMPUTE_32F_FAST_TF32 if tf32 and dtype == np.float32 else _COMPUTE_32F)
        t = _DATA[dtype]
        with self.lock:
            self._status(self.lib.cublasSetStream_v2(self.handle, ctypes.c_void_p(stream)), "cublasSetStream")
            if self._set_workspace is not None:  # setting the stream resets the workspace
                self._status(self._set_workspace(self.handle, ctypes.c_void_p(self.workspace.ptr),
                                                 ctypes.c_size_t(WORKSPACE)), "cublasSetWorkspace")
            self._status(self._gemm(
                self.handle, _OP_T if trans_b else _OP_N, _OP_T if trans_a else _OP_N, n, m, k,
                scalar.ctypes.data, b, t, ldb, stride_b, a, t, lda, stride_a,
                scalar.ctypes.data + scalar.itemsize, c, t, ldc, stride_c, batch, compute, -1), "cublasGemmEx")

    @staticmethod
    def _status(status: int, what: str) -> None:
        if status:
            raise RuntimeError(f"{what} failed with cuBLAS status {status}")


def batches(a_shape: tuple, b_shape: tuple) -> tuple[int, int, int, tuple, tuple, tuple]:
    """(m, k, n, A's batch dims, B's, the broadcast batch dims) of NumPy's matmul of these shapes (1-D operands
    promoted, the batch dims padded to one rank)."""
    a_shape = (1,) + tuple(a_shape) if len(a_shape) == 1 else tuple(a_shape)
    b_shape = tuple(b_shape) + (1,) if len(b_shape) == 1 else tuple(b_shape)
    (m, k), n = a_shape[-2:], b_shape[-1]
    ba, bb = a_shape[:-2], b_shape[:-2]
    bc = tuple(np.broadcast_shapes(ba, bb))
    return m, k, n, (1,) * (len(bc) - len(ba)) + ba, (1,) * (len(bc) - len(bb)) + bb, bc


def matmul(blas: Blas, stream: int, dtype: np.dtype, a_shape: tuple, b_shape: tuple, a: int, b: int, c: int,
           tf32: bool = False) -> None:
    """NumPy matmul semantics (1-D operands, broadcast batches) on contiguous row-major operands at a, b -> c
    (``tf32`` as ``Blas.gemm``)."""
    m, k, n, ba, bb, bc = batches(a_shape, b_shape)
    count = math.prod(bc)
    if ba == bc and math.prod(bb) == 1:  # one B: A's batches fold into its rows, one product
        blas.gemm(stream, dtype, False, False, count * m, n, k, 1.0, a, k, 0, b, n, 0, 0.0, c, n, 0, 1, tf32)
    elif bb == bc and (ba == bc or math.prod(ba) == 1):  # one strided batch (A shared or not)
        blas.gemm(stream, dtype, False, False, m, n, k, 1.0, a, k, m * k if ba == bc else 0, b, n, k * n, 0.0,
                  c, n, m * n, count, tf32)
    else:
        _each(blas, stream, dtype, ba, bb, bc, m, n, k, a, b, c, tf32)


def _each(blas: Blas, stream: int, dtype: np.dtype, ba: tuple, bb: tuple, bc: tuple, m: int, n: int, k: int,
          a: int, b: int, c: int, tf32: bool) -> None:
    """General broadcasting: one product per output matrix."""
    size = dtype.itemsize
    for i, index in enumerate(itertools.product(*[range(d) for d in bc])):
        ia = int(np.ravel_multi_index([x if d > 1 else 0 for x, d in zip(index, ba)], ba)) if ba else 0
        ib = int(np.ravel_multi_index([x if d > 1 else 0 for x, d in zip(index, bb)], bb)) if bb else 0
        blas.gemm(stream, dtype, False, False, m, n, k, 1.0, a + ia * m * k * size, k, 0, b + ib * k * n * size, n,
                  0, 0.0, c + i * m * n * size, n, 0, 1, tf32)


_LIB: list = []


def library() -> ctypes.CDLL | None:
    """The cuBLAS library (looked up once)."""
    if not _LIB:
        _LIB.append(_library())
    return _LIB[0]

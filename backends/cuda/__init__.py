"""The CUDA backend (CuPy): ``backend`` is the backend itself; ``blas`` (cuBLAS/cuBLASLt matrix products),
``dnn`` (cuDNN through ctypes) and ``conv`` (convolutions by cuDNN or im2col + cuBLAS) are its vendor ops;
``driver_start`` starts the CUDA driver on a thread while CuPy imports.
"""

from typing import Any

__all__ = ["CudaBackend"]


def __getattr__(name: str) -> Any:
    """``CudaBackend`` on first use, so that importing one of the modules beside it does not start the backend."""
    if name == "CudaBackend":
        from .backend import CudaBackend

        return CudaBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

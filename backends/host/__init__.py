"""The host backend: NumPy memory and kernels on the machine's CPU, oneDNN and BLAS where installed.

``backend`` is the backend itself; the other modules are what it runs: ``blas`` (which BLAS NumPy
loaded), ``gemm`` and ``conv`` (matrix products and convolutions), ``dnnl*`` (oneDNN through ctypes) and
``omp`` (oneDNN's OpenMP threads).
"""

from typing import Any

__all__ = ["HostBackend"]


def __getattr__(name: str) -> Any:
    """``HostBackend`` on first use, so that importing one of the modules beside it does not start the backend."""
    if name == "HostBackend":
        from .backend import HostBackend

        return HostBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

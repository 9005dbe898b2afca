"""What the CUDA backend's own kernels over vectors of elements share (``depthwise_conv``, ``layernorm``): the
element types they take, the vector they load and store (``vec_t``: ``V`` elements of ``T``, aligned to its
size), and one NVRTC compile per source and set of defines (CuPy keeps the binary on disk)."""

from __future__ import annotations

from typing import Any

import cupy
import numpy as np

#: element types these kernels take, as CUDA C names them
DTYPES = {np.dtype(np.float16): "__half", np.dtype(np.float32): "float"}

_HEADER = "#include <cuda_fp16.h>\nstruct alignas(VB) vec_t { T v[V]; };\n"
_compiled: dict[tuple, Any] = {}


def compiled(source: str, entry: str, dtype: np.dtype, v: int, **defines: int) -> Any:
    """Kernel ``entry`` of ``source`` for elements of ``dtype`` in vectors of ``v``, with integer ``defines``."""
    key = (entry, dtype, v, tuple(defines.items()))
    kernel = _compiled.get(key)
    if kernel is None:
        every = {"T": DTYPES[dtype], "V": v, "VB": v * dtype.itemsize, **defines}
        head = "".join(f"#define {name} {value}\n" for name, value in every.items())
        kernel = _compiled[key] = cupy.RawKernel(head + _HEADER + source, entry)
    return kernel

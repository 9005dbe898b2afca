"""What the CUDA backend's own kernels share: one NVRTC compile per source and set of defines (``kernel``; CuPy
keeps the binary on disk), and for those over vectors of elements (``depthwise_conv``, ``layernorm``) the element
types they take and the vector they load and store (``vec_t``: ``V`` elements of ``T``, aligned to its size)."""

from __future__ import annotations

from typing import Any

import cupy
import numpy as np

from .blas import BFLOAT16

#: element types these kernels take, as CUDA C names them (16-bit floats computed in float)
DTYPES = {np.dtype(np.float16): "__half", np.dtype(np.float32): "float",
          **({BFLOAT16: "__nv_bfloat16"} if BFLOAT16 is not None else {})}

_HEADER = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\nstruct alignas(VB) vec_t { T v[V]; };\n"
_compiled: dict[tuple, Any] = {}


def kernel(source: str, entry: str, header: str = "", **defines: Any) -> Any:
    """Kernel ``entry`` of ``header`` + ``source`` with ``defines`` put before them (compiled once per process; an
    entry names one source)."""
    key = (entry, tuple(sorted(defines.items())))
    found = _compiled.get(key)
    if found is None:
        head = "".join(f"#define {name} {value}\n" for name, value in defines.items())
        found = _compiled[key] = cupy.RawKernel(head + header + source, entry)
    return found


def compiled(source: str, entry: str, dtype: np.dtype, v: int, **defines: int) -> Any:
    """Kernel ``entry`` of ``source`` for elements of ``dtype`` in vectors of ``v``, with integer ``defines``."""
    return kernel(source, entry, _HEADER, T=DTYPES[dtype], V=v, VB=v * dtype.itemsize, **defines)

"""What BLAS NumPy's matrix products run on: the library, the kernels it picked for this CPU, its threads.

OpenBLAS chooses its kernels when it loads (``DYNAMIC_ARCH``), from the CPU it
recognises or from ``OPENBLAS_CORETYPE`` in the environment.  The host's
convolutions and products run at that BLAS's rate, so ``devicelayer info``
reports the choice and says when the CPU could run faster kernels, and why it
does not.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

#: OpenBLAS core names whose kernels use AVX-512
_AVX512_CORES = ("skylakex", "cooperlake", "sapphirerapids")
#: the entry points of OpenBLAS builds: NumPy's (scipy-openblas, 64-bit ints), then plain ones
_PREFIXES = (("scipy_openblas_", "64_"), ("scipy_openblas_", ""), ("openblas_", "64_"), ("openblas_", ""))


def _loaded_openblas() -> list[str]:
    try:
        with open("/proc/self/maps") as f:
            return sorted({line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line})
    except OSError:
        return []


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def blas_extras() -> dict[str, Any]:
    """``blas`` (the library's configuration), ``blas_kernels``, ``blas_threads`` and, where the CPU has
    AVX-512 but the kernels do not use it, ``blas_hint``; empty when no OpenBLAS is loaded."""
    import numpy  # noqa: F401  (loads NumPy's BLAS)

    for path in _loaded_openblas():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for head, tail in _PREFIXES:
            corename = getattr(lib, f"{head}get_corename{tail}", None)
            config = getattr(lib, f"{head}get_config{tail}", None)
            threads = getattr(lib, f"{head}get_num_threads{tail}", None)
            if corename is None or config is None:
                continue
            corename.restype = config.restype = ctypes.c_char_p
            kernels = (corename() or b"").decode(errors="replace")
            out: dict[str, Any] = {"blas": (config() or b"").decode(errors="replace").strip(),
                                   "blas_kernels": kernels}
            if threads is not None:
                threads.restype = ctypes.c_int
                out["blas_threads"] = int(threads())
            if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= _cpu_flags() and \
                    kernels.lower() not in _AVX512_CORES:
                pinned = os.environ.get("OPENBLAS_CORETYPE")
                why = (f"OPENBLAS_CORETYPE={pinned} in the environment holds OpenBLAS to its {kernels} kernels"
                       if pinned else f"OpenBLAS picked its {kernels} kernels")
                out["blas_hint"] = (f"this CPU has AVX-512 but {why}; OPENBLAS_CORETYPE=SkylakeX"
                                    f"{' or unset' if pinned else ''} (read when NumPy loads) selects its "
                                    "AVX-512 ones, about twice the float32 product rate")
            return out
    return {}

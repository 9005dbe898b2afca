"""The CUDA driver's start on a thread of its own, begun before CuPy is imported.

``cuInit`` and each device's primary context take about a quarter of a second, CuPy's
import (its Python modules and the CUDA libraries it loads) about as long; neither
needs the other.  ``begin`` runs the first on a daemon thread through the driver
API (``ctypes`` calls release the GIL) while the importing thread goes on;
``finish`` waits for it before the backend's first CUDA call, which then finds the
driver initialised and the primary contexts made.  The contexts are the ones the
CUDA runtime (and so CuPy) uses: nothing else changes.  Any failure here is left to
the backend's own start, which reports it; the thread only saves time.
"""

from __future__ import annotations

import ctypes
import sys
import threading

_LIBRARIES = ("nvcuda.dll",) if sys.platform == "win32" else ("libcuda.so.1", "libcuda.so")
_lock = threading.Lock()
_thread: threading.Thread | None = None
#: what the thread did: devices whose primary context it made (or found) active, and the first failure
outcome: dict[str, object] = {"contexts": [], "failed": None}


def begin() -> None:
    """Start the driver on a thread (once per process; nothing where it was started already)."""
    global _thread
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_start, name="devicelayer-cuda-start", daemon=True)
            _thread.start()


def finish() -> None:
    """Wait for the thread ``begin`` started (at once where none was)."""
    thread = _thread
    if thread is not None and thread is not threading.current_thread():
        thread.join()


def _start() -> None:
    lib = None
    for name in _LIBRARIES:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        outcome["failed"] = "no CUDA driver library"
        return
    try:
        status = lib.cuInit(0)
        count = ctypes.c_int()
        if status == 0:
            status = lib.cuDeviceGetCount(ctypes.byref(count))
        if status:
            outcome["failed"] = f"CUDA driver status {status}"
            return
        for index in range(count.value):
            device, context = ctypes.c_int(), ctypes.c_void_p()
            # the runtime's context of this device, made now; retained for the process's life, as CuPy keeps it
            if (lib.cuDeviceGet(ctypes.byref(device), index) == 0
                    and lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) == 0):
                outcome["contexts"].append(index)  # type: ignore[union-attr]
    except Exception as exc:  # noqa: BLE001 - a driver without these symbols: the backend's own start reports
        outcome["failed"] = f"{type(exc).__name__}: {exc}"

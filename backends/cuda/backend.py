"""CUDA backend (CuPy): every CUDA device, one non-blocking stream each, NVRTC kernels, pinned staging.

Memory
    Buffers come from a private ``cupy.cuda.MemoryPool`` per device (the user's
    own CuPy pool is left alone).  Freeing returns the block to that pool at once
    (the core only calls ``_release`` once no work uses the buffer), so no free
    ever implicitly synchronizes the device.  ``free_bytes`` is the driver's
    ``cudaMemGetInfo`` figure plus the blocks the pool caches; cached blocks above
    ``CACHE_LIMIT`` are handed back to the driver, and CuPy hands all of them back
    before it reports an out-of-memory error.

Transfers
    Uploads from small (<= ``SMALL_UPLOAD``) or pinned host arrays, and downloads
    into pinned arrays, are one ``cudaMemcpyAsync`` on the device's stream.  Large
    pageable uploads and all pageable downloads go through two pinned staging
    slots per device in ``STAGING_CHUNK`` pieces: the host-side copies run as
    stream host functions (``cudaLaunchHostFunc``, pure NumPy, no CUDA call inside)
    on a side stream, ordered against the DMA on the main stream with events, so
    the caller never blocks and host copies overlap the DMA.  ``host_array()``
    returns pinned memory.  Peer copies between CUDA devices use
    ``cudaMemcpyPeerAsync`` (peer access is enabled on first use where the
    devices allow it).

Compile
    CUDA C through NVRTC (``cupy.RawModule``); kernels must be ``extern "C"``.
    Compiled binaries are cached on disk by CuPy (``$CUPY_CACHE_DIR``, default
    ``~/.cupy/kernel_cache``); CuPy's cache key hashes the source, the options,
    the NVRTC version and the target architecture (``-arch=sm_XY`` of the device's
    compute capability), so devices of different compute capability never share a
    binary and the cache survives across processes.

Events
    Every operation records a ``cupy.cuda.Event`` (timing disabled) on the stream.
    Waits on events of any CUDA device stay on the device (``cudaStreamWaitEvent``
    works across devices); waits on other backends are deferred by the core.

Kernel faults
    An illegal address (or a device-side assert, misaligned access, illegal
    instruction...) is a *sticky* CUDA error: the CUDA context of that device is
    unusable for the rest of the process, and every later call on it fails.  The
    launch's event (and every later event of the device) fails with
    ``LaunchError``; the device is then marked failed and every further call on it
    raises ``LaunchError`` saying so.  Only a new process recovers the GPU.

DLPack
    The pool says what its memory is (``devicelayer/dlpack.py`` does the rest):
    kDLCUDA device pointers; a consumer's stream is made to wait for a tensor's
    event (``cudaStreamWaitEvent``, never the host), and producers are asked to
    order their work before this device's stream.  Memory of other libraries
    (kDLCUDA, kDLCUDAManaged) is wrapped as is; freeing it drops the reference.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import threading
from typing import Any, Callable, Sequence

import numpy as np

from devicelayer.device import Device, Program
from devicelayer.dlpack import DLDeviceType
from devicelayer.errors import BackendUnavailable, CompileError, DLPackError, InvalidArgument, LaunchError, OutOfMemory
from devicelayer.events import DeferredEvent, Event
from devicelayer.info import DeviceInfo, LazyExtras
from devicelayer.memory import Buffer, MemoryPool
from devicelayer.registry import Backend
from devicelayer.signature import Signature, c_signature
from devicelayer.threads import DaemonPool

from . import blas as cuda_blas, blaslt as cuda_blaslt, dnn as cuda_dnn, driver_start

if importlib.util.find_spec("cupy") is not None:  # (no CUDA context for a process that cannot use it)
    driver_start.begin()  # the driver starts while CuPy imports; the backend waits for it before its first call
try:
    import cupy
    from cupy.cuda import runtime
except ImportError as exc:  # the registry reports this as the reason
    raise BackendUnavailable(f"cupy is not installed ({exc}); pip install 'devicelayer[cuda]'") from exc
except Exception as exc:  # a broken CUDA installation can fail CuPy's import in other ways
    raise BackendUnavailable(f"cupy failed to import ({type(exc).__name__}: {exc})") from exc

try:
    from cupy.cuda.compiler import CompileException
except ImportError:  # pragma: no cover
    CompileException = Exception  # type: ignore[misc,assignment]

try:  # a pointer argument CuPy passes as is (no per-launch conversion)
    from cupy.cuda.function import CIntptr as _PtrArg  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    _PtrArg = np.uint64

_CuEvent = cupy.cuda.Event
_OOM = cupy.cuda.memory.OutOfMemoryError
_H2D = runtime.memcpyHostToDevice
_D2H = runtime.memcpyDeviceToHost
_D2D = runtime.memcpyDeviceToDevice
_memcpy_async = runtime.memcpyAsync
_event_query = runtime.eventQuery
_get_device = runtime.getDevice
_set_device = runtime.setDevice
_CUDA_ERRORS: tuple[type[BaseException], ...] = (runtime.CUDARuntimeError,)
try:
    _CUDA_ERRORS += (cupy.cuda.driver.CUDADriverError,)
except AttributeError:  # pragma: no cover
    pass

#: CUDA errors after which the context is unusable (illegal address, assert, misaligned, ...)
_STICKY = {700, 710, 714, 715, 716, 717, 718, 719, 720}
#: pageable uploads up to this size go straight to cudaMemcpyAsync (the driver stages them at once)
SMALL_UPLOAD = 64 << 10
#: bytes per pinned staging slot (two per device)
STAGING_CHUNK = 8 << 20
#: cached free blocks of a device's pool above this go back to the driver
CACHE_LIMIT = 1 << 30
_MEMORY_TYPE_HOST = 1
_NOT_READY = 600  # cudaErrorNotReady
#: threads that copy between pageable arrays and pinned staging (one host thread cannot match PCIe)
COPY_THREADS = max(1, min(4, (os.cpu_count() or 1) // 2))
#: daemon threads: the interpreter's exit does not wait for copies the program gave up on
_copy_pool = DaemonPool(COPY_THREADS, "devicelayer-cuda-copy")


def _status(exc: BaseException) -> int | None:
    return getattr(exc, "status", None)


class CudaEvent(Event):
    """Completion of the ``seq``-th operation on a device's stream.

    Launches record no CUDA event: the native ``cupy.cuda.Event`` is made on first
    need (a poll, a wait, a stream waiting on it) by ``CudaDevice._native_at``,
    which records one at the stream's end, or reuses a later one already
    recorded.  Such an event completes no earlier than the operation; it may
    complete later only when more work was queued behind it before anyone asked.
    """

    def __init__(self, label: str, device: "CudaDevice", native: Any, keepalive: Any = (),
                 host_errors: list | None = None, seq: int = 0) -> None:
        super().__init__(label, device, keepalive)
        self.native = native
        self.seq = seq
        self._host_errors = host_errors
        self._err: BaseException | None = None

    def _nat(self) -> Any:
        native = self.native
        if native is None:
            native = self.native = self.device._native_at(self.seq)
        return native

    def _poll(self) -> bool:
        try:
            status = _event_query(self._nat().ptr)
        except _CUDA_ERRORS as exc:
            self._err = self.device._fault(self.label, exc)
            return True
        if status == 0:
            return True
        if status == _NOT_READY:
            return False
        self._err = self.device._fault(self.label, runtime.CUDARuntimeError(status))
        return True

    def _block(self, timeout: float | None) -> bool:
        if timeout is None:
            try:
                self._nat().synchronize()
            except _CUDA_ERRORS as exc:
                self._err = self.device._fault(self.label, exc)
            return True
        return self._poll_until(timeout)

    def _native_error(self) -> BaseException | None:
        if self._err is not None:
            return self._err
        if self._host_errors:
            return self._host_errors[0]
        return None


class _Foreign:
    """Device memory owned by another library (``from_dlpack``): freeing drops the reference to its owner."""

    __slots__ = ("ptr", "owner")

    def __init__(self, ptr: int, owner: Any) -> None:
        self.ptr = ptr
        self.owner = owner


class CudaPool(MemoryPool):
    """Allocations from a private CuPy memory pool; transfers are async copies on the device's stream."""

    pinned_host_arrays = True  # ``host_array`` is page-locked: a plain async DMA each way
    lends_host_arrays = True  # (CuPy's pinned memory lives while an array over it does)

    def __init__(self, device: "CudaDevice") -> None:
        super().__init__(device)
        self.cupy_pool = cupy.cuda.MemoryPool()
        self._slots: list[np.ndarray] | None = None
        self._slot_mem: list[Any] = []
        self._slot_last: list[Any] = [None, None]
        self._peer_enabled: set[int] = set()

    # -- memory ----------------------------------------------------------------------
    @property
    def free_bytes(self) -> int:
        dev: CudaDevice = self.device  # type: ignore[assignment]
        try:
            with dev.cu_device:
                free, _ = runtime.memGetInfo()
        except _CUDA_ERRORS:
            return max(0, self.total_bytes - self._allocated)
        return min(self.total_bytes, int(free) + int(self.cupy_pool.free_bytes()))

    def _allocate(self, nbytes: int) -> Any:
        dev: CudaDevice = self.device  # type: ignore[assignment]
        dev._check_usable()
        try:
            with dev.cu_device:
                return self.cupy_pool.malloc(nbytes)
        except _OOM as exc:
            raise OutOfMemory(f"{dev.id}: could not allocate {nbytes} bytes: {exc}") from exc
        except _CUDA_ERRORS as exc:
            if _status(exc) == 2:  # cudaErrorMemoryAllocation
                raise OutOfMemory(f"{dev.id}: could not allocate {nbytes} bytes: {exc}") from exc
            raise dev._fault(f"allocate {nbytes} B", exc) from exc

    def _release(self, handle: Any, nbytes: int) -> None:
        if type(handle) is _Foreign:
            handle.owner = None
            return
        handle.mem.free()  # back to the pool; the core calls this only once no work uses the buffer
        pool = self.cupy_pool
        if pool.free_bytes() > CACHE_LIMIT:
            with self.device.cu_device:  # type: ignore[attr-defined]
                pool.free_all_blocks()

    # -- transfers ---------------------------------------------------------------------
    def _staging(self) -> list[np.ndarray]:
        if self._slots is None:
            with self.device.cu_device:  # type: ignore[attr-defined]
                self._slot_mem = [cupy.cuda.alloc_pinned_memory(STAGING_CHUNK) for _ in range(2)]
            self._slots = [np.ndarray((STAGING_CHUNK,), np.uint8, buffer=m) for m in self._slot_mem]
        return self._slots

    def _upload(self, buffer: Buffer, data: np.ndarray, waits: list[Event]) -> Event:
        dev: CudaDevice = self.device  # type: ignore[assignment]
        n = buffer.nbytes
        dst = buffer.handle.ptr + buffer.offset
        label = f"upload {n} B to {dev.id}"
        with dev._enter(label):
            stream = dev.stream
            dev._wait_foreign(stream, waits)
            # CUDA reads pageable memory when the copy is enqueued, not when the stream reaches it: a small
            # pageable upload goes straight only when nothing it waits for may still be writing the array
            if _is_pinned(data) or (n <= SMALL_UPLOAD and all(w.done for w in waits)):
                _memcpy_async(dst, data.ctypes.data, n, _H2D, stream.ptr)
                return dev._record(label, (data,))
            slots, side, errors = self._staging(), dev.side_stream, []
            side.wait_event(dev._mark(stream))  # host copies start after earlier work on the stream
            for i, start in enumerate(range(0, n, STAGING_CHUNK)):
                k, m = i % 2, min(STAGING_CHUNK, n - start)
                if self._slot_last[k] is not None:
                    side.wait_event(self._slot_last[k])  # the slot's previous DMA is done
                side.launch_host_func(_host_copy, (slots[k][:m], data[start:start + m], errors))
                stream.wait_event(dev._mark(side))
                _memcpy_async(dst + start, slots[k].ctypes.data, m, _H2D, stream.ptr)
                self._slot_last[k] = dev._mark(stream)
            return dev._record(label, (data,), errors)

    def _download(self, buffer: Buffer, data: np.ndarray, waits: list[Event]) -> Event:
        dev: CudaDevice = self.device  # type: ignore[assignment]
        n = buffer.nbytes
        src = buffer.handle.ptr + buffer.offset
        label = f"download {n} B from {dev.id}"
        with dev._enter(label):
            stream = dev.stream
            dev._wait_foreign(stream, waits)
            if _is_pinned(data):
                _memcpy_async(data.ctypes.data, src, n, _D2H, stream.ptr)
                return dev._record(label, (data,))
            # D2H into pageable memory would block the caller until the stream drains: stage it
            slots, side, errors = self._staging(), dev.side_stream, []
            last = None
            for i, start in enumerate(range(0, n, STAGING_CHUNK)):
                k, m = i % 2, min(STAGING_CHUNK, n - start)
                if self._slot_last[k] is not None:
                    stream.wait_event(self._slot_last[k])  # the slot's previous host copy is done
                _memcpy_async(slots[k].ctypes.data, src + start, m, _D2H, stream.ptr)
                side.wait_event(dev._mark(stream))
                side.launch_host_func(_host_copy, (data[start:start + m], slots[k][:m], errors))
                last = self._slot_last[k] = dev._mark(side)
            stream.wait_event(last)  # complete only once the data is in the user's array
            return dev._record(label, (data,), errors)

    def _copy(self, dst: Buffer, src: Buffer, waits: list[Event]) -> Event:
        dev: CudaDevice = self.device  # type: ignore[assignment]
        label = f"copy {src.nbytes} B on {dev.id}"
        with dev._enter(label):
            stream = dev.stream
            dev._wait_foreign(stream, waits)
            _memcpy_async(dst.handle.ptr + dst.offset, src.handle.ptr + src.offset, src.nbytes, _D2D, stream.ptr)
            return dev._record(label)

    def _direct_copy(self, dst: Buffer, src: Buffer, wait: Sequence[Event]) -> Event | None:
        """Peer copy between two CUDA devices, on the destination's stream, after ``wait``."""
        if not (isinstance(dst.pool, CudaPool) and isinstance(src.pool, CudaPool)) or dst.pool is src.pool:
            return None
        ddev: CudaDevice = dst.pool.device  # type: ignore[assignment]
        sdev: CudaDevice = src.pool.device  # type: ignore[assignment]
        n = src.nbytes
        label = f"peer copy {n} B {sdev.id} -> {ddev.id}"

        def op(waits: list[Event]) -> Event:
            with ddev._enter(label):
                sdev._check_usable()
                dst.pool._enable_peer(sdev)  # type: ignore[attr-defined]
                stream = ddev.stream
                for w in waits:
                    stream.wait_event(w._nat())  # type: ignore[attr-defined]
                with sdev.cu_device:  # no lock of the source device: two opposite copies must not deadlock
                    stream.wait_event(sdev._mark(sdev.stream))  # after work already queued on the source
                runtime.memcpyPeerAsync(dst.handle.ptr + dst.offset, ddev.index, src.handle.ptr + src.offset,
                                        sdev.index, n, stream.ptr)
                event = ddev._record(label)
                with sdev.cu_device:
                    sdev.stream.wait_event(event._nat())  # later work on the source comes after the read
                return event

        return ddev._submit(label, op, wait, (), (dst, src))

    def _enable_peer(self, peer: "CudaDevice") -> None:
        if peer.index in self._peer_enabled:
            return
        self._peer_enabled.add(peer.index)
        if peer.id in self.device.info.peer_access:
            try:
                runtime.deviceEnablePeerAccess(peer.index)  # current device is this pool's (caller's _enter)
            except _CUDA_ERRORS:
                pass  # already enabled; memcpyPeerAsync works (staged by the driver) either way

    # -- DLPack ----------------------------------------------------------------------------------
    def dlpack_device(self) -> tuple[int, int]:
        return (DLDeviceType.kDLCUDA, self.device.index)  # type: ignore[attr-defined]

    def dlpack_accepts(self, device_type: int, device_id: int) -> bool:
        return device_id == self.device.index and device_type in (  # type: ignore[attr-defined]
            DLDeviceType.kDLCUDA, DLDeviceType.kDLCUDAManaged)

    def dlpack_address(self, buffer: Buffer) -> tuple[int, int]:
        return buffer.handle.ptr + buffer.offset, 0

    def dlpack_stream(self) -> int:
        """This device's stream: a producer orders its pending work before it."""
        return self.device.stream.ptr  # type: ignore[attr-defined]

    def dlpack_sync(self, ready: Event, stream: Any) -> None:
        """Make the consumer's stream wait for ``ready`` on the device: None and 1 are the legacy default stream,
        2 the per-thread default stream, -1 asks for no ordering, other ints are ``cudaStream_t`` handles."""
        if stream == -1:
            return
        if stream is None:
            stream = 1
        if isinstance(stream, bool) or not isinstance(stream, int) or stream <= 0:
            raise DLPackError(f"{self.device.id}: DLPack stream must be None, -1, 1 (legacy default), 2 (per-thread "
                              f"default) or a cudaStream_t handle, got {stream!r} (0 is ambiguous, so disallowed)")
        if isinstance(ready, DeferredEvent) and ready.native is not None:
            ready = ready.native
        if ready.done:
            ready.wait()  # raises if the work failed
            return
        if type(ready) is not CudaEvent:
            ready.wait()  # work of another backend (or not yet submitted): finish it on the host
            return
        dev: CudaDevice = self.device  # type: ignore[assignment]
        with dev._enter("DLPack export"):
            runtime.streamWaitEvent(stream, ready._nat().ptr, 0)

    def wrap_foreign(self, data: int, byte_offset: int, nbytes: int, owner: Any) -> tuple[_Foreign, int]:
        return _Foreign(data + byte_offset, owner), 0

    def is_host_array(self, array: np.ndarray) -> bool:
        """Whether ``array`` lies in page-locked memory (``host_array``'s, or pinned by another library)."""
        return isinstance(array, np.ndarray) and _is_pinned(array)

    def _host_array(self, shape: Any, dtype: Any) -> np.ndarray:
        """A host array in pinned (page-locked) memory: transfers from and to it are plain async DMA."""
        dt = np.dtype(dtype)
        count = int(np.prod(shape))
        nbytes = max(1, count * dt.itemsize)
        try:
            with self.device.cu_device:  # type: ignore[attr-defined]
                mem = cupy.cuda.alloc_pinned_memory(nbytes)
        except _CUDA_ERRORS:
            return np.empty(shape, dt)
        return np.ndarray((count,), dt, buffer=mem).reshape(shape)


def _host_copy(arg: tuple[np.ndarray, np.ndarray, list]) -> None:
    """Stream host function: copy between pinned staging and the user's array (no CUDA call here).

    Both are flat uint8 arrays; large pieces are split over ``COPY_THREADS`` threads.
    """
    dst, src, errors = arg
    try:
        n = dst.shape[0]
        if COPY_THREADS > 1 and n >= (2 << 20):
            step = -(-n // COPY_THREADS)
            pool = _copy_pool
            parts = [pool.submit(np.copyto, dst[i:i + step], src[i:i + step]) for i in range(0, n, step)]
            for part in parts:
                part.result()
        else:
            np.copyto(dst, src)
    except BaseException as exc:  # noqa: BLE001 - reported through the transfer's event
        errors.append(LaunchError(f"host copy of a staged transfer failed: {exc}"))


def _is_pinned(array: np.ndarray) -> bool:
    try:
        return runtime.pointerGetAttributes(array.ctypes.data).type == _MEMORY_TYPE_HOST
    except _CUDA_ERRORS:
        return False


class _Enter:
    """Context manager: make the device current on this thread, turn CUDA errors into devicelayer errors."""

    __slots__ = ("dev", "label", "prev")

    def __init__(self, dev: "CudaDevice", label: str) -> None:
        self.dev, self.label, self.prev = dev, label, -1

    def __enter__(self) -> None:
        dev = self.dev
        dev._check_usable()
        if dev._multi:
            self.prev = _get_device()
            if self.prev != dev.index:
                _set_device(dev.index)

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        if self.prev >= 0 and self.prev != self.dev.index:
            _set_device(self.prev)
        if exc is not None and isinstance(exc, _CUDA_ERRORS):
            raise self.dev._fault(self.label, exc) from exc
        return False


class CudaDevice(Device):
    """One CUDA device: a non-blocking stream for all its work, a side stream for host copies."""

    def __init__(self, info: DeviceInfo, index: int, multi: bool) -> None:
        super().__init__(info)
        self.index = index
        self._multi = multi
        self.cu_device = cupy.cuda.Device(index)
        with self.cu_device:
            self.stream = cupy.cuda.Stream(non_blocking=True)
            self.side_stream = cupy.cuda.Stream(non_blocking=True)
        self.pool = CudaPool(self)
        self._failed: LaunchError | None = None
        self._seq = 0  # operations queued on self.stream (bumped after each is queued)
        self._mark_seq = -1  # the latest native event recorded on self.stream covers operations <= this
        self._mark_ev: Any = None
        self._mark_lock = threading.Lock()
        self._geometry: dict[tuple[int, ...], tuple[tuple[int, ...], tuple[int, ...]]] = {}
        self.capture_failures: list[str] = []  # why recordings fell back to item-by-item replay
        self._blas_handle: cuda_blas.Blas | None = None
        self._dnn_handle: cuda_dnn.Dnn | None = None
        self._library_lock = threading.Lock()  # vendor library handles are made under it
        self._warming: threading.Thread | None = None  # cuBLAS's start on a thread (see _warm_blas)
        self._conv_routes: dict[tuple, Any] = {}  # convolution geometry -> how it runs (see cuda_conv)
        self._gemm_routes: dict[tuple, Any] = {}  # product geometry -> how it runs (see cuda_gemm)
        self._lt_handle: cuda_blaslt.Lt | None = None
        self._capture_stream: Any = None  # the stream recordings are captured on (captures are serialised)
        self._capture_lock = threading.Lock()

    # -- helpers --------------------------------------------------------------------------
    def _enter(self, label: str) -> _Enter:
        return _Enter(self, label)

    def _mark(self, stream: Any) -> Any:
        ev = _CuEvent(False, True, False)
        ev.record(stream)
        return ev

    def _record(self, label: str, keepalive: Any = (), errors: list | None = None) -> CudaEvent:
        """An event at the current end of the stream, keeping ``keepalive`` (host arrays) until it completes."""
        native = self._mark(self.stream)
        with self._mark_lock:
            self._seq = seq = self._seq + 1
            self._mark_seq, self._mark_ev = seq, native
        return CudaEvent(label, self, native, keepalive, errors, seq)

    def _native_at(self, seq: int) -> Any:
        """A native event recorded on the stream after operation ``seq`` was queued (reused when one exists)."""
        with self._mark_lock:
            if self._mark_seq >= seq:
                return self._mark_ev
            queued = self._seq  # read before recording: everything up to here is queued already
            if self._multi:
                with self.cu_device:
                    native = self._mark(self.stream)
            else:
                native = self._mark(self.stream)
            self._mark_seq, self._mark_ev = queued, native
            return native

    def _wait_foreign(self, stream: Any, waits: Sequence[Event]) -> None:
        """Make ``stream`` wait for the pending events of other CUDA devices (this device's are in stream order)."""
        for w in waits:
            if w.device is not self and not w._done:
                stream.wait_event(w._nat())  # type: ignore[attr-defined]

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise LaunchError(f"{self.id} is unusable: {self._failed} (a kernel fault corrupts the CUDA "
                              f"context for the rest of the process)")

    def _fault(self, label: str, exc: BaseException) -> LaunchError:
        """The LaunchError for a CUDA error; a sticky error marks the device failed."""
        err = LaunchError(f"{label}: {exc}")
        err.__cause__ = exc
        if _status(exc) in _STICKY and self._failed is None:
            self._failed = LaunchError(f"{label} hit a sticky CUDA error: {exc}")
        return err

    def _is_native(self, event: Event) -> bool:
        return type(event) is CudaEvent  # cudaStreamWaitEvent takes events of any CUDA device

    # -- compile ----------------------------------------------------------------------------
    def _build(self, source: Any, entry: str, options: tuple[str, ...]) -> tuple[Any, Signature | None]:
        if isinstance(source, (bytes, bytearray, memoryview)):
            source = bytes(source).decode()
        if not isinstance(source, str):
            raise InvalidArgument(f"compile: {self.id} takes CUDA C source text")
        self._check_usable()
        with self.cu_device:
            try:
                module = cupy.RawModule(code=source, options=tuple(options), backend="nvrtc")
                kernel = module.get_function(entry)
                function = kernel.kernel  # compiles (or loads from the disk cache) for this device
            except CompileException as exc:
                log = exc.get_message() if hasattr(exc, "get_message") else str(exc)
                raise CompileError(f"{self.id}: NVRTC compile of {entry!r} failed", log) from None
            except _CUDA_ERRORS as exc:
                if "NOT_FOUND" in str(exc) or _status(exc) == 500:
                    raise CompileError(f"{self.id}: the module has no kernel {entry!r} (declare it "
                                       f"extern \"C\" __global__)", str(exc)) from None
                raise self._fault(f"compile {entry}", exc) from exc
        return (function, f"launch {entry} on {self.id}", module, kernel), c_signature(source, entry)

    def _blas(self) -> cuda_blas.Blas:
        """This device's cuBLAS handle (made on first use, with a workspace of its own)."""
        return self._blas_handle or self._library_handle(
            "_blas_handle", "cuBLAS", cuda_blas.library(),
            lambda lib: cuda_blas.Blas(lib, self.pool.cupy_pool.malloc(cuda_blas.WORKSPACE)))

    def _lt(self) -> cuda_blaslt.Lt | None:
        """This device's cuBLASLt handle (made on first use, with a workspace of its own); None where cuBLASLt is
        missing or does not start (products then take cuBLAS's default)."""
        if self._lt_handle is not None:
            return self._lt_handle
        lib = cuda_blaslt.library()
        if lib is None:
            return None
        try:
            return self._library_handle("_lt_handle", "cuBLASLt", lib, lambda lib: cuda_blaslt.Lt(
                lib, self.pool.cupy_pool.malloc(cuda_blas.WORKSPACE), cuda_blas.WORKSPACE))
        except (LaunchError, cuda_blaslt.LtError):
            return None

    def _dnn(self) -> cuda_dnn.Dnn:
        """This device's cuDNN handle (made on first use)."""
        return self._dnn_handle or self._library_handle("_dnn_handle", "cuDNN", cuda_dnn.library(), cuda_dnn.Dnn)

    def _tuning_identity(self) -> str:
        """The GPU model, driver and the libraries whose choices are kept (cuDNN, CuPy)."""
        i = self.info
        return (f"{i.name}|{i.api_version}|cuDNN {i.extras.get('cudnn')}|CuPy {i.extras.get('cupy')}|"
                f"{i.memory_total}")

    def _library_handle(self, attr: str, name: str, lib: Any, make: Callable[[Any], Any]) -> Any:
        """A vendor library's handle for this device, made once (under a lock of its own, the device current)."""
        with self._library_lock, self.cu_device:
            handle = getattr(self, attr)
            if handle is None:
                if lib is None:
                    raise LaunchError(f"{self.id}: the {name} library was not found")
                handle = make(lib)
                setattr(self, attr, handle)
            return handle

    def _warm_blas(self) -> None:
        """Start cuBLAS on a thread: its handle and its first product take a tenth of a second or more (the
        library's own first-use setup, once a process), which then overlap the compile of the plan that asked for a
        product instead of delaying its first run.  Failures are left to the first real call, which reports them."""
        with self._library_lock:
            if self._warming is not None or self._failed is not None:
                return
            self._warming = threading.Thread(target=self._first_product, name=f"devicelayer-{self.id}-cublas",
                                             daemon=True)
            self._warming.start()  # (it takes this lock to make the handle: it waits until this returns)

    def _first_product(self) -> None:
        try:
            blas = self._blas()
            with self.cu_device:
                stream = cupy.cuda.Stream(non_blocking=True)
                scratch = self.pool.cupy_pool.malloc(256)
                blas.gemm(stream.ptr, np.dtype(np.float32), False, False, 1, 1, 1, 1.0, scratch.ptr, 1, 0,
                          scratch.ptr, 1, 0, 0.0, scratch.ptr + 128, 1, 0, 1)
                stream.synchronize()
        except Exception:  # noqa: BLE001 - the first real product meets and reports the same failure
            pass

    def vendor_op(self, name: str) -> Any:
        """cuBLAS for matmul and gemm; cuDNN for convolutions where it is installed, else im2col + cuBLAS for
        ungrouped ones; cuDNN for the max and average pools it computes as ONNX does; a warp-per-row kernel for
        layer and RMS normalization over short rows (``layernorm``); float16, bfloat16 and float32 attention on
        tensor cores (``flash_attention``); the op kernels for everything else.  Asked
        for a product or a convolution, the device starts cuBLAS on a thread (``_warm_blas``)."""
        if cuda_blas.library() is None:
            return None
        if name in ("matmul", "gemm", "conv") and self._warming is None:
            self._warm_blas()
        if name in ("matmul", "gemm"):
            from . import gemm as cuda_gemm  # (it builds on this module's vendor-op base)

            return cuda_gemm.VendorGemm(self, name, "cuBLAS")
        if name == "conv":
            from . import conv as cuda_conv  # (it builds on this module's vendor-op base)

            if cuda_dnn.library() is not None:
                return cuda_conv.DnnConv(self, name, "cuDNN or im2col + cuBLAS, the faster")
            return cuda_conv.Im2colConv(self, name, "im2col + cuBLAS")
        if name in ("max_pool", "average_pool", "global_average_pool", "global_max_pool") \
                and cuda_dnn.library() is not None:
            from . import pool as cuda_pool  # (it builds on this module's vendor-op base)

            return cuda_pool.DnnPool(self, name, "cuDNN")
        if name in ("layer_normalization", "rms_normalization"):
            from . import layernorm as cuda_norm  # (it builds on this module's vendor-op base)

            return cuda_norm.RowNorm(self, name, "warp-per-row kernel")
        if name == "attention":
            from . import flash_attention  # (it builds on this module's vendor-op base)

            return flash_attention.FlashAttention(self, name, "tensor-core flash attention")
        return None

    def _release_program(self, program: Program) -> None:
        program.handle = None  # the module unloads with its last reference

    # -- launch -----------------------------------------------------------------------------
    def _grid(self, global_size: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        if len(global_size) == 1:
            local = (min(256, global_size[0]),)
        elif len(global_size) == 2:
            local = (min(32, global_size[0]), min(8, global_size[1]))
        else:
            local = (min(16, global_size[0]), min(8, global_size[1]), min(4, global_size[2]))
        grid = tuple(-(-g // b) for g, b in zip(global_size, local))
        if len(self._geometry) > 4096:
            self._geometry.clear()
        self._geometry[global_size] = geometry = (grid, local)
        return geometry

    def _launch(self, program: Program, args: list[Any], global_size: tuple[int, ...],
                local_size: tuple[int, ...] | None, waits: list[Event]) -> Event:
        if self._failed is not None:
            self._check_usable()
        function, label = program.handle[0], program.handle[1]
        grid, block = self._shape(global_size, local_size)
        values = [_pointer(a) if isinstance(a, Buffer) else a for a in args]
        stream = self.stream
        prev = -1
        try:
            if self._multi:
                prev = _get_device()
                if prev != self.index:
                    _set_device(self.index)
            self._wait_foreign(stream, waits)
            function(grid, block, values, 0, stream)
        except _CUDA_ERRORS as exc:
            raise self._fault(label, exc) from exc
        finally:
            if prev >= 0 and prev != self.index:
                _set_device(prev)
        self._seq = seq = self._seq + 1  # under the core's submit lock
        return CudaEvent(label, self, None, (values, function), None, seq)  # buffers, module live until done

    def _default_local_size(self, program: Program, global_size: tuple[int, ...]) -> tuple[int, ...]:
        return self._shape(global_size, None)[1]

    def _shape(self, global_size: tuple[int, ...], local_size: tuple[int, ...] | None) -> tuple[tuple, tuple]:
        """Grid and block of a launch."""
        if local_size is None:
            geometry = self._geometry.get(global_size)
            return geometry if geometry is not None else self._grid(global_size)
        return tuple(g // b for g, b in zip(global_size, local_size)), local_size

    # -- recordings: CUDA graphs ---------------------------------------------------------------
    def _build_recording(self, items: list[Any]) -> Any:
        """A CUDA graph captured from the items; item by item where something cannot be captured."""
        try:
            with self._capture_lock:
                return self._capture(items)
        except Exception as exc:  # e.g. a library call that allocates in a way capture refuses
            self.capture_failures.append(f"{type(exc).__name__}: {exc}")
            return super()._build_recording(items)

    def _capture(self, items: list[Any]) -> "_Captured":
        pool = cupy.cuda.MemoryPool()  # library temporaries of the captured work live as long as the graph
        self._check_usable()
        with self.cu_device:
            if self._capture_stream is None:
                self._capture_stream = cupy.cuda.Stream(non_blocking=True)
            stream = self._capture_stream
            error: BaseException | None = None
            with cupy.cuda.using_allocator(pool.malloc):
                stream.begin_capture(cupy.cuda.runtime.streamCaptureModeRelaxed)
                try:
                    for item in items:
                        self.enqueue_item(item, stream)
                except Exception as exc:
                    error = exc
                try:
                    graph = stream.end_capture()
                except Exception:
                    if error is None:
                        raise
                if error is not None:
                    raise error
            if hasattr(graph, "upload"):
                graph.upload(self.stream)  # instantiate now, not on the first replay
        return _Captured(graph, pool, [item.program for item in items if item.kind == "launch"])

    def enqueue_item(self, item: Any, stream: Any) -> None:
        """Put one recorded item (launch, copy or vendor call) on ``stream``, captured or not (the device is
        current)."""
        if item.kind == "launch":
            grid, block = self._shape(item.global_size, item.local_size)
            values = [_pointer(a) if isinstance(a, Buffer) else a for a in item.args]
            item.program.handle[0](grid, block, values, 0, stream)
        elif item.kind == "copy":
            _memcpy_async(item.dst.handle.ptr + item.dst.offset, item.src.handle.ptr + item.src.offset,
                          item.src.nbytes, _D2D, stream.ptr)
        else:
            enqueue = getattr(item.fn, "enqueue", None)
            if enqueue is None:
                raise RuntimeError(f"{item.label} has no capture form")
            enqueue(stream, *item.call_args)

    def _replay_recording(self, native: Any, waits: list[Event]) -> Event:
        if type(native) is not _Captured:
            return super()._replay_recording(native, waits)
        label = f"replay of a CUDA graph on {self.id}"
        with self._enter(label):
            stream = self.stream
            self._wait_foreign(stream, waits)
            native.graph.launch(stream)
            return self._record(label, keepalive=native)

    def _synchronize(self) -> None:
        with self._enter(f"synchronize {self.id}"):
            self.side_stream.synchronize()
            self.stream.synchronize()

    def _close(self) -> None:
        warming = self._warming
        if warming is not None and warming is not threading.current_thread():
            warming.join()
        try:
            if self._failed is None:
                self._synchronize()
        except LaunchError:
            pass
        finally:
            self._programs.clear()
            if self._dnn_handle is not None:
                try:
                    with self.cu_device:
                        self._dnn_handle.close()
                except _CUDA_ERRORS:
                    pass
            try:
                with self.cu_device:
                    self.pool.cupy_pool.free_all_blocks()  # type: ignore[attr-defined]
            except _CUDA_ERRORS:
                pass


#: how ``devicelayer info`` names the products' library
_PRODUCTS = ("cuBLASLt or cuBLAS, the faster per geometry (a bias row, summand and ReLU or GELU in the product's "
             "launch)")


def _cupy_view(buffer: Buffer, t: Any, index: int) -> "cupy.ndarray":
    """A cupy.ndarray over the first t.size elements of a devicelayer buffer (no copy, no ownership)."""
    return _cupy_at(buffer.handle.ptr + buffer.offset, t.shape, t.dtype, index, buffer)


def _cupy_at(address: int, shape: tuple, dtype: np.dtype, index: int, owner: Any = None) -> "cupy.ndarray":
    """A cupy.ndarray over device memory at ``address`` (no copy; ``owner`` kept alive with it)."""
    nbytes = max(math.prod(shape) * dtype.itemsize, dtype.itemsize)
    mem = cupy.cuda.UnownedMemory(address, nbytes, owner, index)
    return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(mem, 0))


class _Vendor:
    """Work done by a vendor library through CuPy on the device's stream; ``enqueue`` puts it on any stream."""

    def __init__(self, dev: "CudaDevice", name: str, library: str) -> None:
        self.dev, self.name = dev, name
        self.label = f"{name} ({library}) on {dev.id}"

    def __call__(self, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any, wait: Any) -> Event:
        # _submit keeps deferred (cross-device) waits and the device's in-order backlog correct
        return self.dev._submit(self.label, lambda natives: self.native(ins, outs, attrs, in_bufs, out_bufs, natives),
                                wait, (tuple(in_bufs), tuple(out_bufs)), [*in_bufs, *out_bufs])

    def native(self, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any, natives: list[Event]) -> Event:
        """The work after ``natives`` (inside a submission); returns its event."""
        dev = self.dev
        with dev._enter(self.label):
            stream = dev.stream
            dev._wait_foreign(stream, natives)
            with cupy.cuda.using_allocator(dev.pool.cupy_pool.malloc):  # scratch counts against the device
                self.enqueue(stream, ins, outs, attrs, in_bufs, out_bufs)
            return dev._record(self.label, keepalive=(tuple(in_bufs), tuple(out_bufs)))

    def enqueue(self, stream: Any, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any) -> None:
        """Queue the work on ``stream`` (the device is current)."""
        raise NotImplementedError


class _Captured:
    """A captured CUDA graph with the memory pool of its library temporaries and the programs it launches."""

    def __init__(self, graph: Any, pool: Any, programs: list) -> None:
        self.graph, self.pool, self.programs = graph, pool, programs


def _address(buffer: Buffer) -> int:
    """The device address of a buffer (or view)."""
    return buffer.handle.ptr + buffer.offset


def _pointer(buffer: Buffer) -> Any:
    """The device pointer of a buffer (or view) as a kernel argument, cached on the allocation."""
    root = buffer.base if buffer.base is not None else buffer
    cache = root._cache
    ptr = cache.get(buffer.offset)
    if ptr is None:
        ptr = cache[buffer.offset] = _PtrArg(buffer.handle.ptr + buffer.offset)
    return ptr


# -- device info ---------------------------------------------------------------------------------
def _version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def _cudnn_version() -> str | None:
    """cuDNN's version as text ("9.19.0"), None where it is not installed."""
    v = cuda_dnn.version()
    if v is None:
        return None
    return f"{v // 10000}.{v // 100 % 100}.{v % 100}" if v >= 90000 else f"{v // 1000}.{v // 100 % 10}.{v % 100}"


def _nvml_extras(index: int, pci_bus_id: str | None) -> dict[str, Any]:
    """Clocks, power and utilization from NVML when nvidia-ml-py is installed (found by PCI bus id)."""
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return {}
    out: dict[str, Any] = {}
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - NVML is optional
        return {}
    handle = None
    for key in ((pci_bus_id, pci_bus_id.encode()) if pci_bus_id else ()):
        try:
            handle = pynvml.nvmlDeviceGetHandleByPciBusId(key)
            break
        except Exception:  # noqa: BLE001
            continue
    if handle is None and not os.environ.get("CUDA_VISIBLE_DEVICES"):
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception:  # noqa: BLE001
            return {}
    if handle is None:
        return {}
    queries = {
        "nvml_sm_clock_max_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "nvml_mem_clock_max_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM),
        "nvml_sm_clock_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "nvml_power_limit_w": lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0,
        "nvml_power_w": lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
        "nvml_utilization_gpu_pct": lambda: pynvml.nvmlDeviceGetUtilizationRates(handle).gpu,
        "nvml_temperature_c": lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
    }
    for key, query in queries.items():
        try:
            out[key] = query()
        except Exception:  # noqa: BLE001 - not every device reports every figure
            pass
    return out


def _info(index: int, count: int) -> DeviceInfo:
    p = runtime.getDeviceProperties(index)
    name = p.get("name", b"CUDA device")
    name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
    major, minor = int(p.get("major", 0)), int(p.get("minor", 0))
    cc = major * 10 + minor
    dtypes = {"bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
              "float32", "float64"}
    if cc >= 53:
        dtypes.add("float16")
    if cc >= 80:
        dtypes.add("bfloat16")
    peers = []
    for j in range(count):
        if j != index:
            try:
                if runtime.deviceCanAccessPeer(index, j):
                    peers.append(f"cuda:{j}")
            except _CUDA_ERRORS:
                pass
    try:
        pci = runtime.deviceGetPCIBusId(index)
    except (_CUDA_ERRORS + (AttributeError,)):
        pci = None
    integrated = bool(p.get("integrated", 0))
    extras: dict[str, Any] = {
        "compute_capability": f"{major}.{minor}",
        "pci_bus_id": pci,
        "managed_memory": bool(p.get("managedMemory", 0)),
        "concurrent_managed_access": bool(p.get("concurrentManagedAccess", 0)),
        "integrated": integrated,
        "l2_cache": int(p.get("l2CacheSize", 0)),
        "shared_memory_per_block_optin": int(p.get("sharedMemPerBlockOptin", 0)),
        "registers_per_block": int(p.get("regsPerBlock", 0)),
        "max_grid_size": tuple(int(g) for g in p.get("maxGridSize", ())),
        "cuda_runtime": _version(runtime.runtimeGetVersion()),
        "cupy": cupy.__version__,
        "kernel_cache": "CuPy's ($CUPY_CACHE_DIR or ~/.cupy/kernel_cache), keyed by source, options, "
                        "NVRTC version and compute capability",
        "cudnn": _cudnn_version(),
        "vendor_ops": {"matmul": _PRODUCTS, "gemm": _PRODUCTS,
                       "conv": "cuDNN or im2col + cuBLAS, the faster per layer" if cuda_dnn.library() is not None
                       else "im2col + cuBLAS (ungrouped)",
                       **({name: "cuDNN (the calls it computes as ONNX does)" for name in (
                           "max_pool", "average_pool", "global_average_pool", "global_max_pool")}
                          if cuda_dnn.library() is not None else {}),
                       **{name: "devicelayer's warp-per-row kernel (rows of up to 4096 float16, bfloat16 or float32 "
                                "elements)" for name in ("layer_normalization", "rms_normalization")},
                       "attention": "devicelayer's flash-attention kernel on tensor cores (float16 and bfloat16, head "
                                    "sizes of 16-128 in steps of 16; float32 as three TF32 products, head sizes of "
                                    "8-128 in steps of 8; sm_80 and later)"},
    }
    driver = _version(runtime.driverGetVersion())
    total = int(p.get("totalGlobalMem", 0))
    return DeviceInfo(
        id=f"cuda:{index}", backend="cuda", index=index, name=name, vendor="NVIDIA", device_type="gpu",
        driver_version=f"CUDA driver {driver}", api_version=f"CUDA {driver} (runtime {extras['cuda_runtime']}, "
                                                            f"sm_{cc})",
        kernel_language="cuda-c", memory_total=total, max_allocation=total,
        compute_units=int(p.get("multiProcessorCount", 1)), max_work_group_size=int(p.get("maxThreadsPerBlock", 1024)),
        max_work_item_sizes=tuple(int(d) for d in p.get("maxThreadsDim", (1024, 1024, 64))),
        subgroup_size=int(p.get("warpSize", 32)), local_memory=int(p.get("sharedMemPerBlock", 49152)),
        dtypes=frozenset(dtypes), unified_memory=integrated, view_alignment=16, peer_access=tuple(peers),
        timestamps=True, extras=LazyExtras(extras, functools.partial(_nvml_extras, index, pci)),
        max_work_groups=tuple(int(g) for g in p.get("maxGridSize", (2**31 - 1, 65535, 65535))),
    )


class CudaBackend(Backend):
    """Every CUDA device CuPy sees, as ``cuda:0``, ``cuda:1``... (CUDA's device order)."""

    name = "cuda"
    priority = 40

    def __init__(self) -> None:
        driver_start.finish()
        try:
            count = runtime.getDeviceCount()
        except _CUDA_ERRORS as exc:
            raise BackendUnavailable(f"no usable CUDA driver or device ({exc})") from exc
        except Exception as exc:  # CuPy could not load the CUDA libraries
            raise BackendUnavailable(f"CUDA could not be initialised ({type(exc).__name__}: {exc})") from exc
        if count == 0:
            raise BackendUnavailable("the CUDA driver reports no devices")
        self._devices: list[CudaDevice] = []
        self._broken: list[tuple[str, str]] = []
        for i in range(count):
            try:
                self._devices.append(CudaDevice(_info(i, count), i, count > 1))
            except _CUDA_ERRORS as exc:
                self._broken.append((f"CUDA device {i}", str(exc)))
        if not self._devices:
            raise BackendUnavailable(f"no CUDA device could be opened: {self._broken}")

    def devices(self) -> list[CudaDevice]:
        return self._devices

    def unavailable_devices(self) -> list[tuple[str, str]]:
        return self._broken

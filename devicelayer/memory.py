"""Buffers and memory pools: the part of the interface every backend shares."""

from __future__ import annotations

import functools
import gc
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from . import dtypes, hostmemory, reclaim
from .errors import DLPackError, InvalidArgument, OutOfMemory
from .events import CompletedEvent, Event, check_events, dispatcher, when_all
from .interrupts import protected

if TYPE_CHECKING:
    from .device import Device


def device_dtype(dtype: Any, where: str) -> np.dtype:
    """``dtype`` as a NumPy dtype that device memory can hold (names of ``devicelayer.dtypes``' extra dtypes, such
    as "bfloat16", included); InvalidArgument for text, objects and non-dtypes."""
    try:
        dt = dtypes.dtype(dtype)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"{where}: {dtype!r} is not a dtype ({exc})") from None
    if dt.hasobject or dt.kind in "US":
        raise InvalidArgument(f"{where}: {dt} cannot live on a device (Python objects and text cannot)")
    return dt


def check_shape(shape: Any, where: str) -> tuple[int, ...]:
    """``shape`` as a tuple of non-negative ints; InvalidArgument otherwise."""
    dims = (shape,) if isinstance(shape, (int, np.integer)) else shape
    try:
        dims = tuple(dims)
    except TypeError:
        raise InvalidArgument(f"{where}: shape must be a sequence of ints, got {shape!r}") from None
    if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in dims):
        raise InvalidArgument(f"{where}: shape must be a sequence of ints, got {shape!r}")
    if any(d < 0 for d in dims):
        raise InvalidArgument(f"{where}: negative dimension in shape {tuple(int(d) for d in dims)}")
    return tuple(int(d) for d in dims)


#: host arrays from this size on are checked against the memory the machine has available (reading it costs ~50 us)
HOST_CHECK_BYTES = 64 << 20

_frees = [0]  # buffers freed in this process (``frees``)
_frees_lock = threading.Lock()


def frees() -> int:
    """How many buffers this process has freed: what holds buffers checks them again only when it changed."""
    return _frees[0]


def _check_host_room(pool: "MemoryPool", shape: tuple[int, ...], dt: np.dtype) -> None:
    """OutOfMemory for a host array beyond the memory the machine has available: the kernel may hand out more
    (overcommit, or pinned memory a driver maps lazily) and kill the process when it is written."""
    nbytes = int(np.prod(shape, dtype=np.float64)) * dt.itemsize
    if nbytes >= HOST_CHECK_BYTES:
        available = hostmemory.available()
        if nbytes > available:
            raise OutOfMemory(f"{pool.device.id}: host_array of {nbytes:.0f} bytes: the host cannot hold it "
                              f"({available} bytes available)")


def _checked_host_array(host_array: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """``host_array`` receiving its shape and dtype checked (a tuple of ints >= 0, a dtype memory can hold)."""
    @functools.wraps(host_array)
    def checked(self: "MemoryPool", shape: Any, dtype: Any = np.float32) -> np.ndarray:
        shape, dt = check_shape(shape, "host_array"), device_dtype(dtype, "host_array")
        _check_host_room(self, shape, dt)
        return host_array(self, shape, dt)
    return checked


class Buffer:
    """Device memory of one pool; ``view()`` makes a window sharing its storage."""

    # _cache (views made native: OpenCL sub-buffers) is listed before handle so that, when a Buffer dies,
    # its sub-buffers are released before its own reference to the parent allocation
    __slots__ = ("_cache", "_uses", "pool", "nbytes", "offset", "dtype", "handle", "base", "_freed", "foreign",
                 "_finalizer", "__weakref__")

    def __init__(self, pool: "MemoryPool", handle: Any, nbytes: int, *, offset: int = 0,
                 base: "Buffer | None" = None, dtype: np.dtype | None = None) -> None:
        self.pool = pool
        self.handle = handle
        self.nbytes = nbytes
        self.offset = offset
        self.base = base
        self.dtype = dtype
        self._uses: dict[int, Event] = {}
        self._freed = False
        self._cache: dict[Any, Any] = {}
        #: for memory owned by another library (``devicelayer.from_dlpack``): its ``dlpack.Foreign`` record
        self.foreign: Any = None
        #: an allocation's release once the program drops it without ``free`` (``MemoryPool._on_drop``)
        self._finalizer: Any = None

    @property
    def root(self) -> "Buffer":
        """The allocation this buffer (or view) lives in."""
        return self.base if self.base is not None else self

    @property
    def freed(self) -> bool:
        """True once the allocation was freed; a freed buffer and its views cannot be used."""
        return self.root._freed

    @property
    def device(self) -> "Device":
        """The device whose pool holds this buffer."""
        return self.pool.device

    def view(self, offset: int, nbytes: int | None = None, dtype: Any = None) -> "Buffer":
        """A buffer over ``[offset, offset + nbytes)`` of this one, sharing its storage."""
        self.check_alive("view")
        if not isinstance(offset, (int, np.integer)) or isinstance(offset, bool):
            raise InvalidArgument(f"view offset must be an int, got {type(offset).__name__}")
        nbytes = self.nbytes - int(offset) if nbytes is None else nbytes
        if not isinstance(nbytes, (int, np.integer)) or isinstance(nbytes, bool):
            raise InvalidArgument(f"view size must be an int, got {type(nbytes).__name__}")
        offset, nbytes = int(offset), int(nbytes)
        if offset < 0 or nbytes <= 0 or offset + nbytes > self.nbytes:
            raise InvalidArgument(
                f"view [{offset}, {offset + nbytes}) is outside the buffer of {self.nbytes} bytes")
        dt = self.dtype
        if dtype is not None:
            dt = device_dtype(dtype, "view")
            if nbytes % dt.itemsize:
                raise InvalidArgument(f"view: {nbytes} bytes is not a whole number of {dt} elements")
        return Buffer(self.pool, self.handle, nbytes, offset=self.offset + offset, base=self.root, dtype=dt)

    def check_alive(self, where: str) -> None:
        """Raise InvalidArgument when the buffer was freed (BackendUnavailable in a child forked since it was made)."""
        if self.root._freed:
            raise InvalidArgument(f"{where}: buffer was freed (use after free)")
        device = self.pool.device
        if device._forked:
            device._check_open()

    def _track(self, event: Event) -> None:
        """Record work on this buffer, so freeing waits for it.

        Work on one device runs in order, so the newest event of each device
        stands for all earlier ones there.
        """
        self.root._uses[id(event.device) if event.device is not None else id(event)] = event

    def __repr__(self) -> str:
        kind = "view" if self.base is not None else "buffer"
        state = " freed" if self.freed else ""
        return f"<{kind} {self.nbytes} B at +{self.offset} on {self.pool.device.id}{state}>"


def is_masked(array: Any) -> bool:
    """Whether ``array`` is a NumPy masked array (numpy.ma is not imported for the question: where nothing imported
    it, no masked array exists)."""
    ma = sys.modules.get("numpy.ma")
    return ma is not None and isinstance(array, ma.MaskedArray)


def check_unmasked(array: Any, where: str) -> None:
    """InvalidArgument for a NumPy masked array: device memory holds no mask, and dropping it changes the data."""
    if is_masked(array):
        raise InvalidArgument(f"{where}: a masked array would lose its mask; pass array.filled(value) or "
                              f"array.data")


def check_same_dtype(dst: np.dtype | None, src: np.dtype | None, where: str, dst_is: str = "destination holds",
                     src_is: str = "source holds") -> None:
    """InvalidArgument when both sides of a copy have a dtype and they differ (an untyped side takes anything).

    To move the bits of one dtype into another, copy between views of both as ``uint8``."""
    if dst is not None and src is not None and dst != src:
        raise InvalidArgument(f"{where}: {dst_is} {dst}, {src_is} {src} (typed buffers must agree; copy bits "
                              f"through views as uint8)")


def _as_host_bytes(array: Any, buffer: Buffer, where: str, writable: bool) -> np.ndarray:
    """Check a host array against a buffer and return it as a flat uint8 view."""
    if not isinstance(array, np.ndarray):
        raise InvalidArgument(f"{where}: expected a NumPy array, got {type(array).__name__}")
    check_unmasked(array, where)
    if array.dtype.hasobject:
        raise InvalidArgument(f"{where}: arrays of Python objects cannot be copied to a device")
    check_same_dtype(buffer.dtype, array.dtype, where, "buffer holds", "array is")
    if array.nbytes != buffer.nbytes:
        raise InvalidArgument(f"{where}: array has {array.nbytes} bytes, buffer has {buffer.nbytes}")
    if writable:
        if not array.flags.c_contiguous:
            raise InvalidArgument(f"{where}: the destination array must be C-contiguous")
        if not array.flags.writeable:
            raise InvalidArgument(f"{where}: the destination array is read-only")
    elif not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return array.reshape(-1).view(np.uint8)


#: how long an allocation that failed waits for dropped objects' memory to be released before it gives up
RECLAIM_WAIT_SECONDS = 5.0


def _release_dropped(pool: "MemoryPool", held: list[Any], nbytes: int, uses: dict[int, Event],
                     cache: dict[Any, Any]) -> None:
    """On the reclaim thread: release a buffer the program dropped without ``free``, once its work is done."""
    if pool.device._closed:
        held.clear()  # the device released its memory when it closed
        cache.clear()
        return
    pending = [e for e in uses.values() if not e.done]
    uses.clear()
    if not pending:
        pool._release_held(held, nbytes, cache)
        return
    when_all(pending, "free").add_done_callback(
        lambda _: dispatcher.post(lambda: pool._release_held(held, nbytes, cache)))


def settle(timeout: float = 30.0) -> bool:
    """Wait until the memory of buffers the program has dropped, whose work is done, has been released (cycles
    collected first); False if ``timeout`` passed first.  For measuring memory: the release runs on background
    threads (the reclaim thread, then the dispatcher for buffers whose work was still pending)."""
    deadline = time.monotonic() + timeout
    for _ in range(2):  # a release queued behind pending work goes reclaim -> (work done) -> dispatcher
        gc.collect()
        if not reclaim.drain(max(0.0, deadline - time.monotonic())):
            return False
        flushed = threading.Event()
        dispatcher.post(flushed.set)
        if not flushed.wait(max(0.0, deadline - time.monotonic())):
            return False
    return True


class MemoryPool:
    """The memory of one device: allocate, free, upload, download and copy.

    Checks live here; a backend overrides the ``_``-methods, which receive
    validated arguments and, for queue work, the list of native events to wait on.
    """

    #: True when buffers of this pool are host memory readable through ``host_view``.
    maps_host_memory = False
    #: the driver may read an upload's host array when the copy is enqueued rather than when it runs (OpenCL
    #: allows it: NVIDIA's does): an upload whose waits are pending is held until they complete
    reads_host_when_enqueued = False
    #: a plan gives each tensor a whole buffer (reused across lifetimes: ``graph.memory.plan_buffers``) rather
    #: than a view of one arena, where the driver launches slower on views of one allocation
    whole_buffers = False
    #: ``host_array``'s memory stays valid as long as any array over it lives, whatever happens to the device
    #: afterwards (it is not a mapping of a device object): a run may hand such an array to its caller as an output
    lends_host_arrays = False

    @property
    def pinned_host_arrays(self) -> bool:
        """Whether ``host_array`` hands out memory that moves to and from the device faster than an ordinary
        NumPy array's (page-locked or device-visible), so that staging a transfer through one pays; False where
        its arrays are ordinary host memory."""
        return False

    def __init__(self, device: "Device") -> None:
        self.device = device
        self._lock = threading.Lock()
        self._allocated = 0
        self._foreign = 0  # of _allocated: memory of other libraries (``adopt``), which this pool did not hand out
        self._live = 0

    # -- backend hooks -------------------------------------------------------------
    def _allocate(self, nbytes: int) -> Any:
        raise NotImplementedError

    def _release(self, handle: Any, nbytes: int) -> None:
        raise NotImplementedError

    def _upload(self, buffer: Buffer, data: np.ndarray, waits: list[Event]) -> Event:
        raise NotImplementedError

    def _download(self, buffer: Buffer, data: np.ndarray, waits: list[Event]) -> Event:
        raise NotImplementedError

    def _copy(self, dst: Buffer, src: Buffer, waits: list[Event]) -> Event:
        raise NotImplementedError

    def _direct_copy(self, dst: Buffer, src: Buffer, wait: Sequence[Event]) -> Event | None:
        """Copy between this pool and another without the host (peer access); None when impossible."""
        return None

    def host_view(self, buffer: Buffer) -> np.ndarray:
        """The buffer's bytes as a NumPy uint8 array (only where ``maps_host_memory``)."""
        raise InvalidArgument(f"{self.device.id}: buffers are not host memory")

    def host_array(self, shape: Any, dtype: Any = np.float32) -> np.ndarray:
        """A host array that transfers to and from this device fastest (pinned where the backend can);
        OutOfMemory where the host cannot hold it."""
        shape, dt = check_shape(shape, "host_array"), device_dtype(dtype, "host_array")
        if self.device._forked:
            self.device._check_open()
        _check_host_room(self, shape, dt)
        try:
            return self._host_array(shape, dt)
        except MemoryError:
            nbytes = int(np.prod(shape, dtype=np.float64)) * dt.itemsize
            raise OutOfMemory(f"{self.device.id}: host_array of {nbytes:.0f} bytes: the host cannot hold it") from None

    def _host_array(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return np.empty(shape, dtype)

    def is_host_array(self, array: np.ndarray) -> bool:
        """Whether ``array``'s memory is of the faster kind ``host_array`` hands out (``pinned_host_arrays``), so
        that an upload from it needs no staging copy; False where the pool's host arrays are ordinary memory."""
        return False

    # -- DLPack: what this pool's memory is (``devicelayer/dlpack.py`` and ``interop.py`` do the rest) ---------
    def dlpack_device(self) -> tuple[int, int]:
        """The DLPack device (type, id) of this pool's memory; ``kDLExtDev`` where the backend does not say."""
        from .dlpack import DLDeviceType

        return (DLDeviceType.kDLExtDev, self.device.info.index)

    def dlpack_accepts(self, device_type: int, device_id: int) -> bool:
        """True when memory of that DLPack device can be wrapped as buffers of this pool (``wrap_foreign``)."""
        return (int(device_type), int(device_id)) == tuple(self.dlpack_device())

    def dlpack_address(self, buffer: Buffer) -> tuple[int, int]:
        """``(data, byte_offset)`` by which a DLPack consumer addresses ``buffer`` (a pointer, or an opaque memory
        handle with the offset apart, as DLPack has it for some device types); DLPackError where no consumer can
        address this memory."""
        raise DLPackError(f"{self.device.id}: its memory cannot be handed to another library through DLPack; "
                          f"copy it to the host instead (tensor.to('host'), tensor.numpy(), or "
                          f"np.from_dlpack(tensor, device='cpu'))")

    def host_address(self, buffer: Buffer) -> int | None:
        """The host address of ``buffer``'s bytes where the CPU reads and writes them coherently (mapped
        device memory of a unified device), else None: a DLPack export to the host then needs no copy."""
        return None

    def dlpack_stream(self) -> int | None:
        """The stream a DLPack producer is asked to order its pending work before (None: the producer finishes it)."""
        return None

    def dlpack_sync(self, ready: Event, stream: Any) -> None:
        """Make a consumer's ``stream`` (as DLPack passes it) see what ``ready`` completes: on the host by default."""
        if stream is not None and stream != -1:
            raise DLPackError(f"{self.device.id}: a DLPack consumer of this memory passes stream=None, got {stream!r}")
        ready.wait()

    def wrap_foreign(self, data: int, byte_offset: int, nbytes: int, owner: Any) -> tuple[Any, int]:
        """A native handle over another library's memory at ``data`` (+ ``byte_offset``) and the buffer's offset
        in it; ``owner`` must stay alive while the handle is used.  InvalidArgument where it cannot be wrapped."""
        raise InvalidArgument(f"{self.device.id}: memory of another library cannot be wrapped here")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A backend's pool that overrides ``host_array`` (pinned memory) still gets its arguments checked."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("host_array")
        if own is not None:
            cls.host_array = _checked_host_array(own)  # type: ignore[method-assign]

    @property
    def total_bytes(self) -> int:
        """Memory the device has in all."""
        return self.device.info.memory_total

    @property
    def free_bytes(self) -> int:
        """Memory still free on the device (driver figure where there is one, else total less what devicelayer holds)."""
        return max(0, self.total_bytes - self._allocated)

    def _no_room(self, nbytes: int) -> str | None:
        """Why ``nbytes`` more cannot be handed out (None when they can): the pool's own buffers stay within the
        device's memory (called with the pool's lock held).

        Drivers that allocate lazily (PoCL, lavapipe, the host's NumPy) accept far more than the device has and
        fail, or abort the process, when the memory is first touched; so the pool counts what it handed out.
        Memory of another library (``adopt``) is that library's to account for."""
        held = self._allocated - self._foreign
        if held + nbytes <= self.total_bytes:
            return None
        return (f"{held} bytes in {self._live} live buffers of the device's {self.total_bytes} are allocated "
                f"already; free some first")

    @property
    def allocated_bytes(self) -> int:
        """Bytes held by live buffers of this pool."""
        return self._allocated

    @property
    def live_buffers(self) -> int:
        """Number of allocations not yet released."""
        return self._live

    # -- public --------------------------------------------------------------------
    @protected
    def allocate(self, nbytes: int, dtype: Any = None) -> Buffer:
        """A new buffer of ``nbytes`` bytes; ``dtype`` (optional) is checked on upload and download."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)):
            raise InvalidArgument(f"allocate: size must be an int, got {type(nbytes).__name__}")
        nbytes = int(nbytes)
        if nbytes <= 0:
            raise InvalidArgument(f"allocate: size must be positive, got {nbytes}")
        dt = device_dtype(dtype, "allocate") if dtype is not None else None
        if dt is not None and nbytes % dt.itemsize:
            raise InvalidArgument(f"allocate: {nbytes} bytes is not a whole number of {dt} elements")
        info = self.device.info
        self.device._check_open()
        if nbytes > info.max_allocation:
            raise OutOfMemory(f"{info.id}: {nbytes} bytes exceeds the largest allocation the device "
                              f"allows ({info.max_allocation} bytes)")
        if nbytes > self.total_bytes:
            raise OutOfMemory(f"{info.id}: {nbytes} bytes exceeds the device's memory ({self.total_bytes} bytes)")
        self._reserve(nbytes)
        try:
            try:
                handle = self._allocate(nbytes)
            except (OutOfMemory, MemoryError) as exc:
                handle = self._allocate_after_reclaim(nbytes, exc)
        except BaseException:
            with self._lock:
                self._allocated -= nbytes
            raise
        with self._lock:
            self._live += 1
        return self._on_drop(Buffer(self, handle, nbytes, dtype=dt))

    def _reserve(self, nbytes: int) -> None:
        """Count ``nbytes`` as handed out, or raise OutOfMemory when the device's memory cannot hold them too (after
        the memory of dropped objects queued for release has gone)."""
        for attempt in range(2):
            with self._lock:
                why = self._no_room(nbytes)
                if why is None:
                    self._allocated += nbytes
                    return
            if attempt == 0:
                gc.collect()  # dropped buffers held in reference cycles
                if not reclaim.drain(RECLAIM_WAIT_SECONDS):
                    break
        raise OutOfMemory(f"{self.device.id}: cannot allocate {nbytes} bytes: {why}")

    def _allocate_after_reclaim(self, nbytes: int, failure: BaseException) -> Any:
        """Try once more after the memory of dropped plans, tensors and buffers has gone (cycles collected first)."""
        gc.collect()
        if reclaim.drain(RECLAIM_WAIT_SECONDS):
            try:
                return self._allocate(nbytes)
            except (OutOfMemory, MemoryError) as exc:
                failure = exc
        if isinstance(failure, OutOfMemory):
            raise failure
        raise OutOfMemory(f"{self.device.id}: could not allocate {nbytes} bytes: {failure}") from failure

    @protected
    def adopt(self, handle: Any, nbytes: int, dtype: Any = None, *, offset: int = 0, foreign: Any = None) -> Buffer:
        """Wrap memory the backend did not allocate here (DLPack import) as a buffer starting ``offset`` bytes
        into ``handle``; freeing it releases it through ``_release``.  ``foreign`` says whose memory it is."""
        with self._lock:
            self._allocated += nbytes
            self._live += 1
            if foreign is not None:
                self._foreign += nbytes
        buffer = Buffer(self, handle, nbytes, offset=offset, dtype=np.dtype(dtype) if dtype is not None else None)
        buffer.foreign = foreign
        return self._on_drop(buffer)

    def _on_drop(self, buffer: Buffer) -> Buffer:
        """Arrange for ``buffer``'s memory to be released, after the work using it, once the program drops the
        last reference to it (and to its views and Tensors) without ``free``."""
        held = [buffer.handle, buffer.foreign]
        buffer._finalizer = reclaim.on_drop(buffer, _release_dropped, self, held, buffer.nbytes, buffer._uses,
                                            buffer._cache)
        return buffer

    @protected
    def free(self, buffer: Buffer, wait: Sequence[Event] = ()) -> Event:
        """Free ``buffer`` once ``wait`` and all work already using it completes; never blocks.

        The returned event completes when the memory has been released.
        """
        if isinstance(buffer, Buffer) and buffer.pool is self and buffer.base is None and buffer._freed:
            raise InvalidArgument("free: buffer was already freed (double free)")
        self._check_own(buffer, "free")
        if buffer.base is not None:
            raise InvalidArgument("free: this is a view; free the buffer it was made from")
        wait = check_events(wait, "free")
        with self._lock:
            if buffer._freed:
                raise InvalidArgument("free: buffer was already freed (double free)")
            buffer._freed = True
        with _frees_lock:
            _frees[0] += 1
        if buffer._finalizer is not None:
            buffer._finalizer.detach()
            buffer._finalizer = None
        pending = [e for e in buffer._uses.values() if not e.done] + [e for e in wait if not e.done]
        buffer._uses.clear()
        label = f"free {buffer.nbytes} B on {self.device.id}"
        if not pending:
            self._release_buffer(buffer)
            return CompletedEvent(label, device=self.device)
        released = Event(label, self.device)

        def release(_: Event) -> None:
            dispatcher.post(lambda: (self._release_buffer(buffer), released._finish()))

        when_all(pending, "free")._on_done(release)
        return released

    def _release_buffer(self, buffer: Buffer) -> None:
        """Release a freed buffer's memory (its work is done) and drop the buffer's hold on the native handle."""
        handle = buffer.handle
        derived = list(buffer._cache.values())  # native objects of views (OpenCL sub-buffers, pointers)
        buffer._cache.clear()
        buffer.handle = None
        foreign = buffer.foreign is not None
        buffer.foreign = None  # another library's memory: its owner goes with the last reference to it
        try:
            self._release_now(handle, buffer.nbytes, foreign)
        finally:
            # the allocation's last reference goes before its views': NVIDIA's OpenCL driver crashes
            # when a plan's arena is released after the sub-buffers made from it
            del handle
            derived.clear()

    def _release_held(self, held: list[Any], nbytes: int, cache: dict[Any, Any]) -> None:
        """Release the memory of a buffer the program dropped: ``held`` is ``[handle, foreign record]``."""
        handle, foreign = held[0], held[1] is not None
        derived = list(cache.values())
        cache.clear()
        held.clear()
        try:
            self._release_now(handle, nbytes, foreign)
        finally:
            del handle  # as in _release_buffer: the allocation's last reference before its views'
            derived.clear()

    def _release_now(self, handle: Any, nbytes: int, foreign: bool = False) -> None:
        try:
            self._release(handle, nbytes)
        finally:
            with self._lock:
                self._allocated -= nbytes
                self._live -= 1
                if foreign:
                    self._foreign -= nbytes

    def upload(self, buffer: Buffer, host_array: np.ndarray, wait: Sequence[Event] = ()) -> Event:
        """Copy ``host_array`` (same byte size; same dtype when the buffer has one) into ``buffer``."""
        self._check_own(buffer, "upload")
        data = _as_host_bytes(host_array, buffer, "upload", writable=False)
        return self.device._submit(f"upload {buffer.nbytes} B to {self.device.id}",
                                   lambda waits: self._upload(buffer, data, waits), wait, (data, host_array), (buffer,),
                                   hold=self.reads_host_when_enqueued)

    def download(self, buffer: Buffer, host_array: np.ndarray, wait: Sequence[Event] = ()) -> Event:
        """Copy ``buffer`` into the C-contiguous, writable ``host_array`` of the same byte size."""
        self._check_own(buffer, "download")
        data = _as_host_bytes(host_array, buffer, "download", writable=True)
        return self.device._submit(f"download {buffer.nbytes} B from {self.device.id}",
                                   lambda waits: self._download(buffer, data, waits), wait, (data, host_array), (buffer,))

    def copy(self, dst: Buffer, src: Buffer, wait: Sequence[Event] = ()) -> Event:
        """Copy ``src`` into ``dst``, both of this pool, of the same size and dtype (where both have one), not
        overlapping."""
        self._check_copy(dst, src)
        return self.device._submit(f"copy {src.nbytes} B on {self.device.id}",
                                   lambda waits: self._copy(dst, src, waits), wait, (), (dst, src))

    def _check_copy(self, dst: Buffer, src: Buffer) -> None:
        self._check_own(dst, "copy (destination)")
        self._check_own(src, "copy (source)")
        if dst.nbytes != src.nbytes:
            raise InvalidArgument(f"copy: destination has {dst.nbytes} bytes, source has {src.nbytes}")
        check_same_dtype(dst.dtype, src.dtype, "copy")
        if dst.root is src.root and dst.offset < src.offset + src.nbytes and src.offset < dst.offset + dst.nbytes:
            raise InvalidArgument("copy: source and destination overlap")

    def _check_own(self, buffer: Any, where: str) -> None:
        if not isinstance(buffer, Buffer):
            raise InvalidArgument(f"{where}: expected a Buffer, got {type(buffer).__name__}")
        if buffer.pool is not self:
            raise InvalidArgument(f"{where}: buffer belongs to {buffer.pool.device.id}, not {self.device.id}")
        buffer.check_alive(where)

    def __repr__(self) -> str:
        return f"<MemoryPool {self.device.id}: {self._live} buffers, {self._allocated} B>"

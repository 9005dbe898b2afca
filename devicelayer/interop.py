"""Tensors to and from other libraries: DLPack export (``Tensor.__dlpack__``), ``from_dlpack`` and NumPy's
``__array__``.

Zero copy wherever the memory can be shared: a consumer's array and the Tensor are then the same memory, and
freeing the Tensor waits until the consumer has let go of it.  A copy is made only when asked (``copy=True``)
or when the memory cannot be shared (another device; a strided layout); an unasked copy warns (CopyWarning).
"""

from __future__ import annotations

import ctypes
import math
import sys
import warnings
from typing import Any

import numpy as np

from .device import Device
from .dlpack import DLDeviceType, Foreign, device_name, is_capsule, make_capsule, read_capsule, request_capsule
from .errors import CopyWarning, DLPackError, InvalidArgument
from .events import CompletedEvent, UserEvent, dispatcher
from .memory import device_dtype
from .tensors import Tensor, empty, tensor

_HOST = (DLDeviceType.kDLCPU, 0)


def _warn_copy(message: str) -> None:
    """Warn (CopyWarning) at the first caller outside this module."""
    frame, level = sys._getframe(1), 2
    while frame is not None and frame.f_code.co_filename == __file__:
        frame, level = frame.f_back, level + 1
    warnings.warn(message, CopyWarning, stacklevel=level)


def _check_copy(copy: Any, where: str) -> None:
    if copy is not None and not isinstance(copy, (bool, np.bool_)):
        raise InvalidArgument(f"{where}: copy must be True, False or None, got {copy!r}")


def dlpack_device(t: Tensor) -> tuple[DLDeviceType | int, int]:
    """The DLPack (device type, id) of a tensor's memory: another library's own kind for memory it exported."""
    root = t.buffer.root
    kind, index = root.foreign.device if root.foreign is not None else t.device.pool.dlpack_device()
    try:
        return DLDeviceType(kind), int(index)
    except ValueError:
        return int(kind), int(index)


# -- export -------------------------------------------------------------------------------------------------------
class _Export:
    """Owner of an exported tensor until its consumer lets go: ``done`` completes then (so ``free`` waits)."""

    __slots__ = ("done", "free_after", "tensor")

    def __init__(self, t: Tensor, free_after: bool = False) -> None:
        self.tensor = t
        self.free_after = free_after
        self.done = UserEvent("a DLPack consumer")
        uses = t.buffer.root._uses
        for key, ev in list(uses.items()):  # earlier consumers that let go: forget them
            if ev.device is None and ev._done:
                uses.pop(key, None)
        t.buffer._track(self.done)

    def __del__(self) -> None:
        done, t, free_after = self.done, self.tensor, self.free_after

        def finish() -> None:  # on the dispatcher: the consumer may let go in the middle of anything
            done.set()
            if free_after:
                t.free()

        try:
            dispatcher.post(finish)
        except Exception:  # noqa: BLE001, S110 - interpreter shutdown: nothing is left to release
            pass


def _versioned(max_version: Any) -> bool:
    if max_version is None:
        return False
    try:
        major, _minor = (int(v) for v in max_version)
    except (TypeError, ValueError):
        raise DLPackError(f"__dlpack__: max_version must be a (major, minor) pair of ints, got {max_version!r}") \
            from None
    return major >= 1


def _as_dl_device(dl_device: Any) -> tuple[int, int]:
    try:
        kind, index = dl_device
        return int(kind), int(index)
    except (TypeError, ValueError):
        raise DLPackError(f"__dlpack__: dl_device must be a (device type, device id) pair, got {dl_device!r}") \
            from None


def export(t: Tensor, stream: Any, max_version: Any, dl_device: Any, copy: Any) -> Any:
    """``Tensor.__dlpack__``: a capsule of ``t`` for a consumer on ``dl_device`` (default: where it lives)."""
    t.buffer.check_alive("__dlpack__")
    _check_copy(copy, "__dlpack__")
    if stream is not None and (isinstance(stream, bool) or not isinstance(stream, int)):
        raise DLPackError(f"__dlpack__: stream must be an int or None, got {stream!r}")
    versioned = _versioned(max_version)
    own = dlpack_device(t)
    target = own if dl_device is None else _as_dl_device(dl_device)
    pool = t.device.pool
    if tuple(target) == tuple(own) or (target == _HOST and pool.maps_host_memory):
        pool.dlpack_address(t.buffer)  # DLPackError (saying how to copy) where no consumer can address it
        source = t if not copy else _duplicate(t)
        try:
            pool.dlpack_sync(source.ready, stream)
            data, offset = pool.dlpack_address(source.buffer)
            owner = _Export(source, free_after=source is not t)
        except BaseException:
            if source is not t:
                source.free()
            raise
        return make_capsule(data, offset, t.shape, t.dtype, target, owner, versioned,
                            readonly=t.readonly and not copy, copied=source is not t)
    if target != _HOST:
        raise DLPackError(f"{t.device.id}: a tensor in {device_name(own)} memory can be exported there or to the "
                          f"host (dl_device=(1, 0)), not to {device_name(target)}")
    address = pool.host_address(t.buffer) if not copy else None
    if address is not None:  # device memory the CPU addresses (a unified device's mapped memory): no copy
        pool.dlpack_sync(t.ready, stream)
        return make_capsule(address, 0, t.shape, t.dtype, _HOST, _Export(t), versioned, readonly=t.readonly)
    if copy is False:
        raise DLPackError(f"{t.device.id}: exporting to the host needs a copy of this {device_name(own)} memory, "
                          "and copy=False forbids it (use copy=None, tensor.to('host') or tensor.numpy())")
    array = t.numpy()  # waits: the copy is complete when the consumer gets it
    return make_capsule(array.ctypes.data, 0, t.shape, t.dtype, _HOST, array, versioned, copied=True)


def _duplicate(t: Tensor) -> Tensor:
    """A copy of ``t`` in a new buffer of the same device (asynchronous)."""
    out = empty(t.shape, t.dtype, t.device)
    if t.nbytes:
        pool = t.device.pool
        out.ready = pool.copy(out.buffer.view(0, t.nbytes, np.uint8), t.buffer.view(0, t.nbytes, np.uint8),
                              wait=[t.ready])
    return out


def as_array(t: Tensor, dtype: Any, copy: Any) -> np.ndarray:
    """``Tensor.__array__``: a view of host memory (waits for ``ready``), else a copy (waits for it)."""
    _check_copy(copy, "__array__")
    t.buffer.check_alive("__array__")
    pool = t.device.pool
    want = None if dtype is None else device_dtype(dtype, "__array__")
    if pool.maps_host_memory and not copy:
        t.ready.wait()
        array = pool.host_view(t.buffer)[:t.nbytes].view(t.dtype).reshape(t.shape)
        if t.readonly:
            array = array.view()
            array.flags.writeable = False
        if want is None or want == t.dtype:
            return array
        if copy is False:
            raise InvalidArgument(f"__array__: converting {t.dtype} to {want} needs a copy, and copy=False forbids it")
        return array.astype(want)
    if copy is False:
        raise InvalidArgument(f"__array__: the tensor lives on {t.device.id}; reading it on the host needs a copy, "
                              "and copy=False forbids it (use np.asarray(t) or t.numpy())")
    array = t.numpy()
    return array if want is None or want == t.dtype else array.astype(want)


# -- import -------------------------------------------------------------------------------------------------------
def _device_for(device: tuple[int, int]) -> Device | None:
    """The devicelayer device whose pool can wrap memory of this DLPack device, None when none can."""
    from .registry import devices

    for dev in devices():
        if dev.pool.dlpack_accepts(*device):
            return dev
    return None


def _owner_name(obj: Any) -> str:
    module = type(obj).__module__ or ""
    return module.partition(".")[0] if module and module != "builtins" else type(obj).__name__


def from_dlpack(obj: Any, device: Device | str | None = None, copy: bool | None = None) -> Tensor:
    """A Tensor over another library's array (anything with ``__dlpack__``, or a DLPack capsule).

    The memory is shared (no copy) when it lives where a devicelayer device can address it and ``device`` is
    that device or None; the Tensor then keeps the other library's array alive until it is freed, and is
    read-only where the producer said so.  ``copy=True`` always copies; ``copy=False`` refuses to copy
    (DLPackError); otherwise a copy that cannot be avoided (another device, a strided layout) is made and warned
    of (CopyWarning).  Pending work of the producer is ordered before the Tensor's use through DLPack's stream
    handshake.
    """
    from .registry import device as find

    _check_copy(copy, "from_dlpack")
    target = find(device) if device is not None else None
    if isinstance(obj, Tensor):
        obj.buffer.check_alive("from_dlpack")
        return _placed(Tensor(obj.buffer, obj.shape, obj.dtype, obj.ready, obj.readonly), target, copy, False)
    if is_capsule(obj):
        return _adopt(read_capsule(obj), "a DLPack capsule", target, copy)
    if not hasattr(obj, "__dlpack__"):
        raise InvalidArgument(f"from_dlpack: {type(obj).__name__} is not a DLPack producer (it has no __dlpack__); "
                              "give arrays and lists to devicelayer.tensor(x, device)")
    source: tuple[int, int] | None = None
    if hasattr(obj, "__dlpack_device__"):
        try:
            kind, index = obj.__dlpack_device__()
            source = (int(kind), int(index))
        except (TypeError, ValueError) as exc:
            raise DLPackError(f"from_dlpack: {type(obj).__name__}.__dlpack_device__() gave no (type, id): {exc}") \
                from None
    home = _device_for(source) if source is not None else None
    dl_device = None
    if source is not None and home is None:  # memory no device here can address: ask the producer for a host copy
        if copy is False:
            raise DLPackError(f"from_dlpack: no devicelayer device can address {device_name(source)} memory and "
                              f"copy=False forbids a copy (devices: {_device_list()})")
        dl_device = _HOST
    stream = home.pool.dlpack_stream() if home is not None else None
    try:
        capsule = request_capsule(obj, stream=stream, dl_device=dl_device, copy=True if dl_device else None)
    except DLPackError:
        raise
    except (BufferError, RuntimeError, ValueError) as exc:
        where = f" ({device_name(source)} memory, which no devicelayer device addresses)" if dl_device else ""
        raise DLPackError(f"from_dlpack: {type(obj).__name__} refused to export{where}: {exc}") from exc
    managed = read_capsule(capsule)
    if dl_device is not None and copy is None:
        _warn_copy(f"from_dlpack: {device_name(source)} memory was copied through the host (no devicelayer device "
                   "addresses it)")
        copy = False  # the producer's copy is ours to keep
    return _adopt(managed, _owner_name(obj), target, copy, home if tuple(managed.device) == source else None)


def _device_list() -> str:
    from .registry import devices

    return ", ".join(d.id for d in devices())


def _adopt(managed: Any, owner: str, target: Device | None, copy: Any, home: Device | None = None) -> Tensor:
    """A Tensor over a consumed capsule's memory (``home``: the device found for it, where known), then placed on
    ``target`` (copied where needed)."""
    home = home or _device_for(managed.device)
    if home is None:
        managed.release()
        raise DLPackError(f"from_dlpack: no devicelayer device can address {device_name(managed.device)} memory "
                          f"(devices: {_device_list()})")
    shape, dtype = managed.shape, managed.dtype
    nbytes = math.prod(shape) * dtype.itemsize
    if not nbytes:
        managed.release()
        return empty(shape, dtype, target or home)
    if not managed.contiguous():
        return _gather(managed, home, target, copy)
    handle, offset = home.pool.wrap_foreign(managed.data, managed.byte_offset, nbytes, managed)
    buffer = home.pool.adopt(handle, nbytes, dtype, offset=offset, foreign=Foreign(managed.device, owner, managed))
    return _placed(Tensor(buffer, shape, dtype, CompletedEvent("from_dlpack"), managed.readonly), target, copy, True)


def _placed(t: Tensor, target: Device | None, copy: Any, owned: bool) -> Tensor:
    """``t`` on ``target`` (None: where it is): itself, or a copy (``copy=True``, or another device)."""
    moved: Tensor | None = None
    if target is None or target is t.device:
        if copy:
            moved = _duplicate(t)
    elif copy is False:
        if owned:
            t.free()
        raise DLPackError(f"from_dlpack: the memory is on {t.device.id}; placing it on {target.id} needs a copy, "
                          "and copy=False forbids it")
    else:
        if copy is None:
            _warn_copy(f"from_dlpack: the memory is on {t.device.id}, so it was copied to {target.id}")
        moved = t.to(target)
    if moved is None:
        return t
    if owned:
        t.free()  # the foreign memory goes back to its owner once the copy has read it
    return moved


def _gather(managed: Any, home: Device, target: Device | None, copy: Any) -> Tensor:
    """A contiguous copy of strided memory (host memory only: elsewhere the producer must make it contiguous)."""
    shape, dtype = managed.shape, managed.dtype
    where = f"{device_name(managed.device)} memory of shape {shape}, strides {managed.strides} (elements)"
    if copy is False or not home.pool.maps_host_memory:
        managed.release()
        raise DLPackError(f"from_dlpack: {where} is not C-contiguous, so it cannot be shared"
                          + ("" if home.pool.maps_host_memory else
                             "; make it contiguous in the library that owns it first (x.contiguous(), "
                             "ascontiguousarray(x))"))
    itemsize = dtype.itemsize
    span = 1 + sum((n - 1) * abs(s) for n, s in zip(shape, managed.strides))
    low = sum((n - 1) * s for n, s in zip(shape, managed.strides) if s < 0)
    raw = (ctypes.c_uint8 * (span * itemsize)).from_address(managed.data + managed.byte_offset + low * itemsize)
    flat = np.frombuffer(raw, dtype)
    view = np.lib.stride_tricks.as_strided(flat[-low:] if low else flat, shape,
                                           tuple(s * itemsize for s in managed.strides), writeable=False)
    array = np.ascontiguousarray(view)
    managed.release()
    if copy is None:
        _warn_copy(f"from_dlpack: {where} is not C-contiguous, so it was copied")
    return tensor(array, target or home)

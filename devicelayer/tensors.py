"""Tensor: a typed, shaped window on a device buffer, with the event that makes it ready."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

from .casting import to_dtype
from .device import Device
from .errors import InvalidArgument
from .events import CompletedEvent, Event
from .interrupts import protected
from .memory import Buffer, check_shape, check_unmasked, device_dtype


class Tensor:
    """A C-contiguous array living in a device buffer; ``ready`` completes when its contents are written.

    Other libraries take it through DLPack (``np.from_dlpack(t)``, ``torch.from_dlpack(t)``) and NumPy through
    ``np.asarray(t)``; ``readonly`` marks memory another library exported read-only.
    """

    __slots__ = ("buffer", "shape", "dtype", "ready", "readonly")

    def __init__(self, buffer: Buffer, shape: Sequence[int], dtype: Any, ready: Event | None = None,
                 readonly: bool = False) -> None:
        if not isinstance(buffer, Buffer):
            raise InvalidArgument(f"Tensor: expected a Buffer, got {type(buffer).__name__}")
        self.buffer = buffer
        self.shape = check_shape(shape, "Tensor")
        self.dtype = device_dtype(dtype, "Tensor")
        self.ready = ready if ready is not None else CompletedEvent("tensor")
        self.readonly = bool(readonly)
        if self.nbytes > buffer.nbytes:
            raise InvalidArgument(f"tensor of {self.shape} {self.dtype} needs {self.nbytes} bytes, "
                                  f"buffer has {buffer.nbytes}")

    @property
    def device(self) -> Device:
        """The device holding the tensor."""
        return self.buffer.pool.device

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """Bytes of the elements."""
        return self.size * self.dtype.itemsize

    def numpy(self) -> np.ndarray:
        """Copy to a new NumPy array (waits for the tensor and the copy)."""
        self.buffer.check_alive("numpy")
        out = np.empty(self.shape, self.dtype)
        if out.nbytes:
            view = self.buffer if self.buffer.nbytes == out.nbytes else self.buffer.view(0, out.nbytes)
            self.device.pool.download(view.view(0, out.nbytes, self.dtype), out, wait=[self.ready]).wait()
        else:
            self.ready.wait()
        return out

    def reshape(self, shape: Sequence[int]) -> "Tensor":
        """The same storage seen with another shape of the same size (no copy)."""
        shape = check_shape(shape, "reshape")
        if int(np.prod(shape, dtype=np.int64)) != self.size:
            raise InvalidArgument(f"cannot reshape {self.shape} to {shape}")
        return Tensor(self.buffer, shape, self.dtype, self.ready, self.readonly)

    @protected
    def to(self, device: Device | str) -> "Tensor":
        """This tensor on ``device``: a new Tensor copied there by the fastest path (asynchronously; ``ready``
        says when), or this very Tensor when it already lives there."""
        from .registry import device as find
        from .transfer import transfer

        dev = find(device)
        self.buffer.check_alive("to")
        if dev is self.device:
            return self
        if not self.nbytes:
            return empty(self.shape, self.dtype, dev)
        moved, event = transfer(self.buffer.view(0, self.nbytes, self.dtype), dev.pool, wait=[self.ready])
        return Tensor(moved, self.shape, self.dtype, event)

    def free(self) -> Event:
        """Release the tensor's memory once the work using it (and any DLPack consumer of it) is done; never
        blocks.  Every Tensor sharing the buffer (``reshape``) is freed with it; using one afterwards raises
        InvalidArgument.  Freeing again does nothing (the returned event is complete).  Memory of another library
        (``from_dlpack``) goes back to its owner."""
        buffer = self.buffer
        if buffer.base is not None:
            raise InvalidArgument("free: this tensor is a view into a buffer it does not own; free the buffer's owner "
                                  f"({buffer.root!r})")
        if buffer.freed:
            return CompletedEvent("free (already freed)", device=self.device)
        return self.device.pool.free(buffer, wait=[self.ready])

    # -- exchange with other libraries (devicelayer/interop.py) ------------------------------------------------
    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """A DLPack capsule of this tensor (the array API's protocol): zero copy on its own device, ordered after
        ``ready`` on the consumer's ``stream``; a copy where ``copy=True`` or ``dl_device`` asks for the host."""
        from .interop import export

        return export(self, stream, max_version, dl_device, copy)

    def __dlpack_device__(self) -> tuple[Any, int]:
        """The DLPack (device type, device id) of the tensor's memory."""
        from .interop import dlpack_device

        return dlpack_device(self)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """``np.asarray(tensor)``: a view of host memory (no copy), a copy of any other device's memory (waits)."""
        from .interop import as_array

        return as_array(self, dtype, copy)

    def __repr__(self) -> str:
        buffer = self.buffer
        flags = []
        if buffer.freed:
            flags.append("freed")
        elif not self.ready.done:
            flags.append("pending")
        elif self.ready.error is not None:
            flags.append("failed")
        if self.readonly:
            flags.append("read-only")
        if buffer.root.foreign is not None:
            flags.append(f"shared with {buffer.root.foreign.owner_name}")
        shape = "(" + ", ".join(str(d) for d in self.shape) + ("," if len(self.shape) == 1 else "") + ")"
        return (f"<Tensor {shape} {self.dtype} on {buffer.pool.device.id}, {self.nbytes} B"
                + "".join(f", {f}" for f in flags) + ">")


@protected
def tensor(array: Any, device: Device | str, dtype: Any = None, wait: Sequence[Event] = ()) -> Tensor:
    """Upload ``array`` to ``device`` as a Tensor (asynchronously; ``tensor.ready`` says when)."""
    from .registry import device as find

    dev = find(device)
    check_unmasked(array, "tensor")
    want = None if dtype is None else device_dtype(dtype, "tensor")
    try:
        arr = np.asarray(array) if want is None else to_dtype(array, want, "tensor")
    except (TypeError, ValueError) as exc:
        if isinstance(exc, InvalidArgument):
            raise
        raise InvalidArgument(f"tensor: cannot convert {type(array).__name__} to an array: {exc}") from None
    device_dtype(arr.dtype, "tensor")
    if not arr.flags.c_contiguous:
        arr = arr.copy(order="C")  # (ascontiguousarray would turn a 0-d array into 1-d)
    buf = dev.pool.allocate(max(arr.nbytes, arr.dtype.itemsize), arr.dtype)
    try:
        ev = dev.pool.upload(buf.view(0, arr.nbytes, arr.dtype), arr, wait) if arr.nbytes else \
            CompletedEvent("empty tensor")
    except BaseException:
        dev.pool.free(buf)
        raise
    return Tensor(buf, arr.shape, arr.dtype, ev)


@protected
def free_all(tensors: Iterable[Tensor]) -> None:
    """``free()`` each Tensor that owns its buffer (views are skipped), every one of them even under Ctrl-C."""
    for t in tensors:
        if t.buffer.base is None:
            t.free()


@protected
def empty(shape: Sequence[int], dtype: Any, device: Device | str) -> Tensor:
    """An uninitialised tensor on ``device``."""
    from .registry import device as find

    dev = find(device)
    dt = device_dtype(dtype, "empty")
    shape = check_shape(shape, "empty")
    n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    return Tensor(dev.pool.allocate(max(n, dt.itemsize), dt), shape, dt)

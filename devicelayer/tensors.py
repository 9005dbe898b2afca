"""Tensor: a typed, shaped window on a device buffer, with the event that makes it ready."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .device import Device
from .errors import InvalidArgument
from .events import CompletedEvent, Event
from .memory import Buffer, check_shape, device_dtype


class Tensor:
    """A C-contiguous array living in a device buffer; ``ready`` completes when its contents are written."""

    __slots__ = ("buffer", "shape", "dtype", "ready")

    def __init__(self, buffer: Buffer, shape: Sequence[int], dtype: Any, ready: Event | None = None) -> None:
        if not isinstance(buffer, Buffer):
            raise InvalidArgument(f"Tensor: expected a Buffer, got {type(buffer).__name__}")
        self.buffer = buffer
        self.shape = check_shape(shape, "Tensor")
        self.dtype = device_dtype(dtype, "Tensor")
        self.ready = ready if ready is not None else CompletedEvent("tensor")
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
        return Tensor(self.buffer, shape, self.dtype, self.ready)

    def __repr__(self) -> str:
        return f"<Tensor {self.shape} {self.dtype} on {self.device.id}>"


def tensor(array: Any, device: Device | str, dtype: Any = None, wait: Sequence[Event] = ()) -> Tensor:
    """Upload ``array`` to ``device`` as a Tensor (asynchronously; ``tensor.ready`` says when)."""
    from .registry import device as find

    dev = find(device)
    try:
        arr = np.asarray(array, dtype=None if dtype is None else device_dtype(dtype, "tensor"))
    except (TypeError, ValueError) as exc:
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


def empty(shape: Sequence[int], dtype: Any, device: Device | str) -> Tensor:
    """An uninitialised tensor on ``device``."""
    from .registry import device as find

    dev = find(device)
    dt = device_dtype(dtype, "empty")
    shape = check_shape(shape, "empty")
    n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    return Tensor(dev.pool.allocate(max(n, dt.itemsize), dt), shape, dt)

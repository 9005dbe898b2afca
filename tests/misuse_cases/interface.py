"""Misuse of the interface: device ids, pools, buffers, views and host arrays."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl
from devicelayer import BackendUnavailable, DeviceNotFound, InvalidArgument, OutOfMemory

from .catalogue import misuse, misuses

A = "interface"


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


misuses(A, None, [
    ("pool-allocate-zero", "allocate 0 bytes", InvalidArgument, "size must be positive",
     lambda s, _: s.pool.allocate(0)),
    ("pool-allocate-negative", "allocate a negative size", InvalidArgument, "size must be positive",
     lambda s, _: s.pool.allocate(-(1 << 40))),
    ("pool-allocate-not-int", "allocate 1.5 bytes", InvalidArgument, "size must be an int",
     lambda s, _: s.pool.allocate(1.5)),
    ("pool-allocate-bool", "allocate True bytes", InvalidArgument, "size must be an int",
     lambda s, _: s.pool.allocate(True)),
    ("pool-allocate-too-large", "allocate 2**62 bytes", OutOfMemory, "exceeds",
     lambda s, _: s.pool.allocate(1 << 62)),
    ("pool-allocate-over-max-allocation", "allocate one byte more than the device's largest allocation",
     OutOfMemory, "largest allocation", lambda s, _: s.pool.allocate(s.device.info.max_allocation + 1)),
    ("pool-allocate-partial-element", "allocate 10 bytes of float32", InvalidArgument, "whole number",
     lambda s, _: s.pool.allocate(10, np.float32)),
    ("pool-allocate-bad-dtype", "allocate with a dtype NumPy does not know", InvalidArgument, "is not a dtype",
     lambda s, _: s.pool.allocate(16, "no_such_dtype")),
    ("pool-allocate-object-dtype", "allocate a buffer of Python objects", InvalidArgument,
     "cannot live on a device", lambda s, _: s.pool.allocate(64, object)),
    ("device-unknown-backend", "ask for device 'nope:0'", DeviceNotFound, "no backend named 'nope'",
     lambda s, _: dl.device("nope:0")),
    ("device-malformed-id", "ask for device 'opencl:x'", DeviceNotFound, "is malformed",
     lambda s, _: dl.device("opencl:x")),
    ("device-index-out-of-range", "ask for device 99 of the device's backend", DeviceNotFound, ":99'",
     lambda s, _: dl.device(f"{s.device.info.backend}:99")),
    ("device-id-not-a-string", "ask for device 5", InvalidArgument, "expected an id",
     lambda s, _: dl.device(5)),
    ("devices-unknown-backend", "list the devices of backend 'warpdrive'", InvalidArgument, "unknown backend",
     lambda s, _: dl.devices(["warpdrive"])),
])


def _buffer16(s):
    return s.buffer(16, np.float32)


misuses(A, _buffer16, [
    ("upload-size-mismatch", "upload 20 bytes into a 16-byte buffer", InvalidArgument,
     "array has 20 bytes, buffer has 16", lambda s, buf: s.pool.upload(buf, np.zeros(5, np.float32))),
    ("download-size-mismatch", "download a 16-byte buffer into 12 bytes", InvalidArgument,
     "array has 12 bytes, buffer has 16", lambda s, buf: s.pool.download(buf, np.zeros(3, np.float32))),
    ("upload-dtype-mismatch", "upload int32 data into a float32 buffer", InvalidArgument,
     "buffer holds float32, array is int32", lambda s, buf: s.pool.upload(buf, np.zeros(4, np.int32))),
    ("upload-not-an-array", "upload a Python list", InvalidArgument, "expected a NumPy array",
     lambda s, buf: s.pool.upload(buf, [1.0, 2.0, 3.0, 4.0])),
    ("upload-object-array", "upload an array of Python objects", InvalidArgument, "Python objects",
     lambda s, buf: s.pool.upload(buf, np.empty(2, object))),
    ("upload-masked-array", "upload a NumPy masked array", InvalidArgument, "would lose its mask",
     lambda s, buf: s.pool.upload(buf, np.ma.masked_array(np.zeros(4, np.float32), mask=[0, 1, 0, 0]))),
    ("download-read-only", "download into a read-only array", InvalidArgument, "read-only",
     lambda s, buf: s.pool.download(buf, _read_only(np.zeros(4, np.float32)))),
    ("download-non-contiguous", "download into a strided array", InvalidArgument, "C-contiguous",
     lambda s, buf: s.pool.download(buf, np.zeros(8, np.float32)[::2])),
    ("download-dtype-mismatch", "download a float32 buffer into int32 data", InvalidArgument,
     "buffer holds float32, array is int32", lambda s, buf: s.pool.download(buf, np.zeros(4, np.int32))),
    ("copy-dtype-mismatch", "copy a float32 buffer into an int32 buffer", InvalidArgument,
     "destination holds int32, source holds float32", lambda s, buf: s.pool.copy(s.buffer(16, np.int32), buf)),
    ("record-copy-dtype-mismatch", "record a copy of a float32 buffer into an int32 buffer", InvalidArgument,
     "destination holds int32, source holds float32",
     lambda s, buf: s.device.record().copy(s.buffer(16, np.int32), buf)),
])


def _allocate_until_refused(s) -> None:
    """Allocate buffers of a quarter of the device's memory (at most its largest allocation) until the pool
    refuses one; never written, and all freed on the way out.  Drivers that allocate lazily accepted any number."""
    pool = s.pool
    size = min(s.device.info.max_allocation, pool.total_bytes // 4 + 4096)
    held = []
    try:
        for _ in range(pool.total_bytes // size + 2):
            held.append(pool.allocate(size))
    finally:
        for buf in held:
            pool.free(buf)


misuses(A, None, [
    ("pool-allocate-beyond-device-memory", "allocate untouched buffers until they exceed the device's memory",
     OutOfMemory, "cannot allocate", lambda s, _: _allocate_until_refused(s)),
])


def _buffer64(s):
    return s.buffer(64)


misuses(A, _buffer64, [
    ("free-a-view", "free a view instead of its buffer", InvalidArgument, "this is a view",
     lambda s, buf: s.pool.free(buf.view(0, 8))),
    ("view-past-end", "view bytes 60 to 68 of a 64-byte buffer", InvalidArgument, "outside the buffer",
     lambda s, buf: buf.view(60, 8)),
    ("view-empty", "view 0 bytes", InvalidArgument, "outside the buffer", lambda s, buf: buf.view(0, 0)),
    ("view-negative-offset", "view at offset -1", InvalidArgument, "outside the buffer",
     lambda s, buf: buf.view(-1, 8)),
    ("view-float-offset", "view at offset 1.5", InvalidArgument, "offset must be an int",
     lambda s, buf: buf.view(1.5, 8)),
    ("view-partial-element", "view 6 bytes as float32", InvalidArgument, "whole number",
     lambda s, buf: buf.view(0, 6, np.float32)),
    ("view-bad-dtype", "view with a dtype NumPy does not know", InvalidArgument, "is not a dtype",
     lambda s, buf: buf.view(0, 8, "no_such_dtype")),
    ("copy-overlapping", "copy between overlapping views of one buffer", InvalidArgument, "overlap",
     lambda s, buf: s.pool.copy(buf.view(0, 32), buf.view(16, 32))),
    ("copy-size-mismatch", "copy 16 bytes into 32", InvalidArgument, "destination has 32 bytes, source has 16",
     lambda s, buf: s.pool.copy(buf.view(0, 32), buf.view(32, 16))),
])


def _freed64(s):
    return s.freed(64)


misuses(A, _freed64, [
    ("upload-after-free", "upload into a freed buffer", InvalidArgument, "use after free",
     lambda s, buf: s.pool.upload(buf, np.zeros(64, np.uint8))),
    ("free-twice", "free a buffer twice", InvalidArgument, "double free", lambda s, buf: s.pool.free(buf)),
    ("view-of-freed-buffer", "view a freed buffer", InvalidArgument, "use after free",
     lambda s, buf: buf.view(0, 8)),
])


def _foreign64(s):
    return s.buffer(64, device=s.other())


misuses(A, _foreign64, [
    ("upload-foreign-buffer", "upload into a buffer of another device", InvalidArgument, "belongs to",
     lambda s, buf: s.pool.upload(buf, np.zeros(64, np.uint8))),
    ("free-foreign-buffer", "free a buffer in another device's pool", InvalidArgument, "belongs to",
     lambda s, buf: s.pool.free(buf)),
])


@misuse("copy-views-of-freed-buffer", A, "copy between views made before their buffer was freed",
        InvalidArgument, "use after free")
def _(s):
    buf = s.buffer(64)
    low, high = buf.view(0, 32), buf.view(32, 32)
    s.pool.free(buf).wait(30)
    return lambda: s.pool.copy(low, high)


@misuse("host-array-negative-shape", A, "ask for a pinned host array of shape (-1,)", InvalidArgument,
        "negative dimension")
def _(s):
    return lambda: s.pool.host_array(-1)


@misuse("host-array-beyond-the-host", A, "ask for a pinned host array of 2^40 float32 (4 TiB)", OutOfMemory,
        "the host cannot hold it")
def _(s):
    return lambda: s.pool.host_array((1 << 40,), np.float32)


@misuse("host-array-bad-dtype", A, "ask for a pinned host array of a dtype NumPy does not know", InvalidArgument,
        "is not a dtype")
def _(s):
    return lambda: s.pool.host_array(4, "no_such_dtype")


@misuse("device-unavailable-backend", A, "ask for a device of a backend that could not start", BackendUnavailable,
        "is unavailable")
def _(s):
    started = {d.info.backend for d in dl.devices()}
    missing = [u for u in dl.unavailable() if u.backend not in started]
    if not missing:
        pytest.skip("every backend started")
    return lambda: dl.device(f"{missing[0].backend}:0")


@misuse("close-negative-timeout", A, "close a device with timeout=-1", InvalidArgument, "timeout must be")
def _(s):
    dev = s.private_host()
    return lambda: dev.close(timeout=-1)


@misuse("closed-device-allocate", A, "allocate on a closed device", InvalidArgument, "device was closed")
def _(s):
    dev = s.private_host()
    dev.close()
    return lambda: dev.pool.allocate(8)


@misuse("closed-device-upload", A, "upload into a buffer of a device closed since", InvalidArgument,
        "device was closed")
def _(s):
    dev = s.private_host()
    buf = dev.pool.allocate(8)
    dev.close()
    return lambda: dev.pool.upload(buf, np.zeros(8, np.uint8))

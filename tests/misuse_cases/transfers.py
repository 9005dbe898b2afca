"""Misuse of transfers between pools (``transfer``, ``copy_between``) and of device Tensors."""

from __future__ import annotations

import numpy as np

import devicelayer as dl
from devicelayer import DeviceNotFound, InvalidArgument
from devicelayer.transfer import copy_between

from .catalogue import misuse, misuses

A = "transfers"


def _buffer64(s):
    return s.buffer(64, np.float32)


misuses(A, _buffer64, [
    ("transfer-not-a-buffer", "transfer a NumPy array", InvalidArgument, "expected a Buffer",
     lambda s, buf: dl.transfer(np.zeros(16, np.float32), s.pool)),
    ("transfer-to-a-device", "transfer to a Device instead of its pool", InvalidArgument, "expected a MemoryPool",
     lambda s, buf: dl.transfer(buf, s.device)),
    ("transfer-bad-wait-list", "transfer after wait=[1]", InvalidArgument, "not an Event",
     lambda s, buf: dl.transfer(buf, s.pool, wait=[1])),
    ("copy-between-not-buffers", "copy_between a buffer and an array", InvalidArgument, "expected two Buffers",
     lambda s, buf: copy_between(buf, np.zeros(16, np.float32))),
    ("tensor-reshape-wrong-size", "reshape 16 elements to 15", InvalidArgument, "cannot reshape",
     lambda s, buf: dl.Tensor(buf, (16,), np.float32).reshape((3, 5))),
    ("tensor-larger-than-buffer", "make a Tensor of 100 float32 on a 64-byte buffer", InvalidArgument,
     "needs 400 bytes, buffer has 64", lambda s, buf: dl.Tensor(buf, (100,), np.float32)),
    ("tensor-negative-shape", "make a Tensor of shape (-1,)", InvalidArgument, "negative dimension",
     lambda s, buf: dl.Tensor(buf, (-1,), np.float32)),
])


def _freed64(s):
    return s.freed(64, np.float32)


misuses(A, _freed64, [
    ("transfer-freed-buffer", "transfer a freed buffer", InvalidArgument, "use after free",
     lambda s, buf: dl.transfer(buf, s.pool)),
    ("tensor-numpy-after-free", "read a Tensor whose buffer was freed", InvalidArgument, "use after free",
     lambda s, buf: dl.Tensor(buf, (16,), np.float32).numpy()),
])


misuses(A, None, [
    ("tensor-object-array", "make a Tensor of Python objects", InvalidArgument, "cannot live on a device",
     lambda s, _: dl.tensor(np.array([object(), object()]), s.device)),
    ("tensor-text-array", "make a Tensor of strings", InvalidArgument, "cannot live on a device",
     lambda s, _: dl.tensor(np.array(["a", "b"]), s.device)),
    ("tensor-bad-wait-list", "make a Tensor after wait=[1]", InvalidArgument, "not an Event",
     lambda s, _: dl.tensor(np.ones(4, np.float32), s.device, wait=[1])),
    ("tensor-unknown-device", "make a Tensor on device 'nope:0'", DeviceNotFound, "no backend named 'nope'",
     lambda s, _: dl.tensor(np.ones(4, np.float32), "nope:0")),
    ("tensor-ragged-list", "make a Tensor of a ragged list", InvalidArgument, "cannot convert",
     lambda s, _: dl.tensor([[1.0, 2.0], [3.0]], s.device)),
    ("empty-negative-shape", "make an empty Tensor of shape (-1,)", InvalidArgument, "negative dimension",
     lambda s, _: dl.empty((-1,), np.float32, s.device)),
    ("empty-bad-dtype", "make an empty Tensor of a dtype NumPy does not know", InvalidArgument, "is not a dtype",
     lambda s, _: dl.empty((4,), "no_such_dtype", s.device)),
])


@misuse("transfer-to-closed-device", A, "transfer into the pool of a closed device", InvalidArgument,
        "device was closed")
def _(s):
    dev = s.private_host()
    dev.close()
    buf = s.buffer(64)
    return lambda: dl.transfer(buf, dev.pool)


@misuse("copy-between-size-mismatch", A, "copy_between 64 bytes and 32 bytes of another device", InvalidArgument,
        "destination has 32 bytes, source has 64")
def _(s):
    src, dst = s.buffer(64), s.buffer(32, device=s.other())
    return lambda: copy_between(dst, src)


@misuse("copy-between-dtype-mismatch", A, "copy_between a float32 buffer and an int32 buffer of another device",
        InvalidArgument, "destination holds int32, source holds float32")
def _(s):
    src, dst = s.buffer(64, np.float32), s.buffer(64, np.int32, device=s.other())
    return lambda: copy_between(dst, src)


@misuse("copy-between-freed-destination", A, "copy_between into a freed buffer", InvalidArgument, "use after free")
def _(s):
    src, dst = s.buffer(64, device=s.other()), s.freed(64)
    return lambda: copy_between(dst, src)

"""Misuse of the exchange with other libraries: DLPack (Tensor.__dlpack__, from_dlpack), __array__, to(), free()."""

from __future__ import annotations

import numpy as np

import devicelayer as dl
from devicelayer import DeviceNotFound, DLPackError, InvalidArgument

from .catalogue import misuses

A = "interop"
X = np.arange(6, dtype=np.float32)


class _Elsewhere:
    """A DLPack producer whose memory no devicelayer device addresses, and which gives no host copy."""

    def __dlpack__(self, **_):
        raise BufferError("no copy to the host either")

    def __dlpack_device__(self):
        return (dl.DLDeviceType.kDLHexagon, 0)


def _used_capsule(s):
    capsule = np.zeros(3, np.float32).__dlpack__()
    dl.from_dlpack(capsule).free()
    return capsule


def _freed_tensor(s):
    t = dl.tensor(X, s.device)
    t.free().wait(30)
    return t


def _view_tensor(s):
    return dl.Tensor(s.buffer(64, np.float32).view(16, 16, np.float32), (4,), np.float32)


misuses(A, None, [
    ("dlpack-not-a-producer", "from_dlpack of a Python list", InvalidArgument, "not a DLPack producer",
     lambda s, _: dl.from_dlpack([1, 2, 3], s.device)),
    ("dlpack-copy-not-bool", "from_dlpack with copy='yes'", InvalidArgument, "copy must be True, False or None",
     lambda s, _: dl.from_dlpack(X, s.device, copy="yes")),
    ("dlpack-unknown-memory", "from_dlpack of memory no device addresses", DLPackError, "kDLHexagon",
     lambda s, _: dl.from_dlpack(_Elsewhere(), s.device)),
    ("dlpack-strided-no-copy", "from_dlpack of a strided array with copy=False", DLPackError,
     "is not C-contiguous", lambda s, _: dl.from_dlpack(np.zeros((4, 6), np.float32)[:, ::2], copy=False)),
])

misuses(A, _used_capsule, [
    ("dlpack-capsule-used-twice", "from_dlpack of a capsule already consumed", InvalidArgument,
     "already consumed", lambda s, capsule: dl.from_dlpack(capsule, s.device)),
])

misuses(A, lambda s: s.tensor(X), [
    ("dlpack-across-devices-no-copy", "from_dlpack of a tensor onto another device with copy=False", DLPackError,
     "copy=False forbids it", lambda s, t: dl.from_dlpack(t, s.other(), copy=False)),
    ("dlpack-export-bad-max-version", "__dlpack__(max_version='1.0')", DLPackError,
     "max_version must be a (major, minor) pair", lambda s, t: t.__dlpack__(max_version="1.0")),
    ("dlpack-export-bad-dl-device", "__dlpack__(dl_device='cpu')", DLPackError, "dl_device must be a",
     lambda s, t: t.__dlpack__(dl_device="cpu")),
    ("dlpack-export-foreign-device", "__dlpack__ to a Hexagon DSP", DLPackError, "kDLHexagon",
     lambda s, t: t.__dlpack__(dl_device=(dl.DLDeviceType.kDLHexagon, 0))),
    ("dlpack-export-bad-stream", "__dlpack__(stream='fast')", DLPackError, "stream",
     lambda s, t: t.__dlpack__(stream="fast")),
    ("array-copy-false-needs-copy", "np.asarray to float64 with copy=False", InvalidArgument, "needs a copy",
     lambda s, t: t.__array__(np.float64, copy=False)),
    ("tensor-to-unknown-device", "tensor.to('nope:0')", DeviceNotFound, "no backend named 'nope'",
     lambda s, t: t.to("nope:0")),
])

misuses(A, _freed_tensor, [
    ("dlpack-export-freed", "__dlpack__ of a freed tensor", InvalidArgument, "use after free",
     lambda s, t: t.__dlpack__()),
    ("array-of-freed", "np.asarray of a freed tensor", InvalidArgument, "use after free",
     lambda s, t: np.asarray(t)),
    ("tensor-to-freed", "to() of a freed tensor", InvalidArgument, "use after free",
     lambda s, t: t.to(s.device)),
])

misuses(A, _view_tensor, [
    ("tensor-free-view", "free a tensor over a view of a buffer", InvalidArgument,
     "a view into a buffer it does not own", lambda s, t: t.free()),
])

"""DLPack, the array exchange protocol: its C structures, dtype codes, and capsules made and read once for every
device.

Backends say only what their memory is (``MemoryPool.dlpack_device``, ``dlpack_address``, ``dlpack_stream``,
``dlpack_sync``, ``wrap_foreign``); this module knows the ABI (``dlpack.h``, versions 0.8 and 1.x).

A capsule devicelayer hands out is made by NumPy's exporter over a *carrier* array that claims the memory's
address without touching it, and is then stamped with the memory's real device, dtype and offset.  NumPy's
deleter is C: it takes the GIL and drops the carrier, whose base holds the owner devicelayer gives it.  A
deleter written in Python (a ctypes callback) cannot be used: consumers release memory at any point, also while
an exception is being raised, and a Python callback run then replaces that exception with a SystemError.
"""

from __future__ import annotations

import ctypes
import enum
from collections.abc import Sequence
from ctypes import POINTER, Structure, c_int32, c_int64, c_uint8, c_uint16, c_uint32, c_uint64, c_void_p
from typing import Any

import numpy as np

from .errors import DLPackError, InvalidArgument


class DLDeviceType(enum.IntEnum):
    """DLPack's device types (``DLDeviceType`` of ``dlpack.h``)."""

    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLOneAPI = 14
    kDLWebGPU = 15
    kDLHexagon = 16
    kDLMAIA = 17


class DLDataTypeCode(enum.IntEnum):
    """DLPack's dtype codes (``DLDataTypeCode``)."""

    kDLInt = 0
    kDLUInt = 1
    kDLFloat = 2
    kDLOpaqueHandle = 3
    kDLBfloat = 4
    kDLComplex = 5
    kDLBool = 6


#: DLManagedTensorVersioned.flags: the consumer must not write the memory
READ_ONLY = 1 << 0
#: DLManagedTensorVersioned.flags: the producer copied the data for this export
IS_COPIED = 1 << 1
#: the DLPack version devicelayer reads and writes
VERSION = (1, 0)


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32), ("dtype", DLDataType),
                ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class DLManagedTensor(Structure):
    """The unversioned managed tensor (DLPack < 1.0), in capsules named ``dltensor``."""

    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", c_void_p)]


class DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(Structure):
    """The versioned managed tensor (DLPack >= 1.0), in capsules named ``dltensor_versioned``."""

    _fields_ = [("version", DLPackVersion), ("manager_ctx", c_void_p), ("deleter", c_void_p), ("flags", c_uint64),
                ("dl_tensor", DLTensor)]


# -- capsules through the C API (the names must outlive every capsule: static buffers) --------------------------
_NAME = ctypes.create_string_buffer(b"dltensor")
_NAME_VERSIONED = ctypes.create_string_buffer(b"dltensor_versioned")
_USED = ctypes.create_string_buffer(b"used_dltensor")
_USED_VERSIONED = ctypes.create_string_buffer(b"used_dltensor_versioned")

_api = ctypes.pythonapi
_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, c_void_p)(("PyCapsule_IsValid", _api))
_get_pointer = ctypes.PYFUNCTYPE(c_void_p, ctypes.py_object, c_void_p)(("PyCapsule_GetPointer", _api))
_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, c_void_p)(("PyCapsule_SetName", _api))
_get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", _api))
#: a producer's deleter, called with the GIL held (deleters that take it themselves take it again)
_Deleter = ctypes.PYFUNCTYPE(None, c_void_p)


def is_capsule(obj: Any) -> bool:
    """True for a PyCapsule (of any name)."""
    return type(obj).__name__ == "PyCapsule" and type(obj).__module__ == "builtins"


def device_name(device: Sequence[int]) -> str:
    """A DLPack device as text: ``kDLCUDA:0``."""
    kind, index = int(device[0]), int(device[1])
    try:
        return f"{DLDeviceType(kind).name}:{index}"
    except ValueError:
        return f"device type {kind}:{index}"


# -- dtypes -------------------------------------------------------------------------------------------------------
_KIND_CODES = {"i": DLDataTypeCode.kDLInt, "u": DLDataTypeCode.kDLUInt, "f": DLDataTypeCode.kDLFloat,
               "c": DLDataTypeCode.kDLComplex, "b": DLDataTypeCode.kDLBool}


def dl_dtype(dtype: np.dtype) -> tuple[int, int]:
    """DLPack's (code, bits) for a NumPy dtype; DLPackError for one DLPack cannot name."""
    dtype = np.dtype(dtype)
    code = _KIND_CODES.get(dtype.kind)
    if code is None and dtype.kind == "V" and dtype.name == "bfloat16":
        return DLDataTypeCode.kDLBfloat, 16
    if code is None or not dtype.isnative:
        raise DLPackError(f"DLPack has no dtype for {dtype}")
    return code, dtype.itemsize * 8


def np_dtype(code: int, bits: int, lanes: int) -> np.dtype:
    """The NumPy dtype of a DLPack (code, bits, lanes); DLPackError for one devicelayer cannot hold."""
    what = f"DLPack dtype (code {code}, {bits} bits, {lanes} lanes)"
    if lanes != 1:
        raise DLPackError(f"{what}: vector dtypes (lanes > 1) are not supported")
    if code == DLDataTypeCode.kDLBfloat and bits == 16:
        try:
            import ml_dtypes  # type: ignore[import-not-found]
        except ImportError:
            raise DLPackError(f"{what} is bfloat16, which needs the ml_dtypes package") from None
        return np.dtype(ml_dtypes.bfloat16)
    kind = {DLDataTypeCode.kDLInt: "i", DLDataTypeCode.kDLUInt: "u", DLDataTypeCode.kDLFloat: "f",
            DLDataTypeCode.kDLComplex: "c", DLDataTypeCode.kDLBool: "b"}.get(code)
    if kind is None or bits % 8 or (kind == "b" and bits != 8):
        raise DLPackError(f"{what} is not supported")
    if kind == "b":
        return np.dtype(np.bool_)
    try:
        return np.dtype(f"{kind}{bits // 8}")
    except TypeError:
        raise DLPackError(f"{what} is not supported") from None


# -- reading a capsule ----------------------------------------------------------------------------------------------
class Managed:
    """A consumed capsule: what its DLTensor says, and the producer's deleter (``release()``, once).

    ``data`` is the address (or an opaque memory handle) and ``byte_offset`` the offset from it; ``strides`` are in
    elements (None: compact row-major).
    """

    __slots__ = ("__weakref__", "_address", "_released", "_versioned", "byte_offset", "copied", "data", "device",
                 "dtype", "readonly", "shape", "strides")

    def __init__(self, address: int, versioned: bool) -> None:
        self._address, self._versioned, self._released = address, versioned, False
        struct = (DLManagedTensorVersioned if versioned else DLManagedTensor).from_address(address)
        flags = int(struct.flags) if versioned else 0
        t = struct.dl_tensor
        self.device = (int(t.device.device_type), int(t.device.device_id))
        self.data = int(t.data or 0)
        self.byte_offset = int(t.byte_offset)
        ndim = int(t.ndim)
        if ndim < 0:
            self.release()
            raise DLPackError(f"DLPack tensor with ndim {ndim}")
        self.shape = tuple(int(t.shape[i]) for i in range(ndim)) if ndim else ()
        self.strides = tuple(int(t.strides[i]) for i in range(ndim)) if ndim and t.strides else None
        self.readonly = bool(flags & READ_ONLY)
        self.copied = bool(flags & IS_COPIED)
        try:
            self.dtype = np_dtype(t.dtype.code, t.dtype.bits, t.dtype.lanes)
        except DLPackError:
            self.release()
            raise

    def release(self) -> None:
        """Hand the memory back to its producer (calls the deleter once)."""
        if self._released:
            return
        self._released = True
        struct_type = DLManagedTensorVersioned if self._versioned else DLManagedTensor
        deleter = struct_type.from_address(self._address).deleter
        if deleter:
            _Deleter(deleter)(self._address)

    def contiguous(self) -> bool:
        """True when the elements are compact and row-major (dims of size 1 may have any stride)."""
        if self.strides is None:
            return True
        expected = 1
        for size, stride in zip(reversed(self.shape), reversed(self.strides)):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # noqa: BLE001, S110 - a deleter failing at shutdown must not raise from __del__
            pass

    def __repr__(self) -> str:
        return f"<DLPack {device_name(self.device)} {self.shape} {self.dtype}{' read-only' if self.readonly else ''}>"


def read_capsule(capsule: Any) -> Managed:
    """Consume a DLPack capsule (renamed ``used_...``): what it describes, owning the producer's deleter."""
    if not is_capsule(capsule):
        raise InvalidArgument(f"expected a DLPack capsule, got {type(capsule).__name__}")
    if _is_valid(capsule, ctypes.addressof(_NAME_VERSIONED)):
        versioned, used = True, _USED_VERSIONED
        address = _get_pointer(capsule, ctypes.addressof(_NAME_VERSIONED))
    elif _is_valid(capsule, ctypes.addressof(_NAME)):
        versioned, used = False, _USED
        address = _get_pointer(capsule, ctypes.addressof(_NAME))
    else:
        name = _get_name(capsule)
        if name in (b"used_dltensor", b"used_dltensor_versioned"):
            raise InvalidArgument("this DLPack capsule was already consumed (a capsule can be used once)")
        raise InvalidArgument(f"not a DLPack capsule (its name is {name!r})")
    if versioned:
        version = DLManagedTensorVersioned.from_address(address).version
        if version.major > VERSION[0]:
            deleter = DLManagedTensorVersioned.from_address(address).deleter
            _set_name(capsule, ctypes.addressof(used))
            if deleter:
                _Deleter(deleter)(address)
            raise DLPackError(f"the producer exported DLPack {version.major}.{version.minor}; devicelayer reads "
                              f"major version {VERSION[0]}")
    _set_name(capsule, ctypes.addressof(used))
    return Managed(address, versioned)


def request_capsule(obj: Any, stream: Any = None, max_version: tuple[int, int] | None = VERSION,
                    dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
    """``obj.__dlpack__(...)`` with the keywords its producer takes: older producers take no ``max_version``,
    ``dl_device`` or ``copy`` (DLPack < 2023.12), and those it does not name are left out."""
    kwargs: dict[str, Any] = {}
    if stream is not None:
        kwargs["stream"] = stream
    attempts = []
    full = dict(kwargs, max_version=max_version)
    if dl_device is not None:
        full["dl_device"] = dl_device
    if copy is not None:
        full["copy"] = copy
    attempts.append(full)
    if dl_device is None and copy is None:
        attempts.append(kwargs)
    error: TypeError | None = None
    for kw in attempts:
        try:
            return obj.__dlpack__(**kw)
        except TypeError as exc:
            error = exc
    if dl_device is not None or copy is not None:
        raise DLPackError(f"{type(obj).__name__}.__dlpack__ does not take dl_device= or copy= (an older DLPack "
                          f"producer): {error}") from error
    raise DLPackError(f"{type(obj).__name__}.__dlpack__ failed: {error}") from error


# -- making a capsule -----------------------------------------------------------------------------------------------
class _Carrier:
    """What NumPy's exporter is handed: an array interface at the memory's address (never read), and the owner
    the carrier array keeps as its base until the consumer calls the deleter."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, data: int, shape: tuple[int, ...], typestr: str, readonly: bool, owner: Any) -> None:
        self.__array_interface__ = {"data": (data, readonly), "shape": shape, "typestr": typestr, "version": 3}
        self.owner = owner


def make_capsule(data: int, byte_offset: int, shape: Sequence[int], dtype: np.dtype, device: Sequence[int],
                 owner: Any, versioned: bool, readonly: bool = False, copied: bool = False) -> Any:
    """A capsule describing memory at ``data`` (+ ``byte_offset``) of ``device``: C-contiguous ``shape`` of
    ``dtype``.  ``owner`` stays referenced until the consumer calls the deleter (or the unused capsule dies).

    ``versioned``: a DLPack 1.0 capsule (with ``readonly`` and ``copied`` flags) where NumPy can make one
    (NumPy >= 2.1), else an unversioned one; a read-only export needs a versioned capsule (DLPackError).
    """
    dtype = np.dtype(dtype)
    code, bits = dl_dtype(dtype)
    carrier_dtype = dtype if code != DLDataTypeCode.kDLBfloat else np.dtype(np.uint16)
    carrier = np.asarray(_Carrier(data, tuple(shape), carrier_dtype.str, readonly, owner))
    capsule = None
    if versioned:
        try:
            capsule = carrier.__dlpack__(max_version=VERSION)
        except TypeError:  # NumPy < 2.1 makes unversioned capsules only
            versioned = False
    if not versioned:
        if readonly:
            raise DLPackError("this tensor is read-only, which only a versioned DLPack capsule can say: the consumer "
                              "asked for an unversioned one (pass max_version=(1, 0), or copy=True)")
        capsule = carrier.__dlpack__()
    name = _NAME_VERSIONED if versioned else _NAME
    address = _get_pointer(capsule, ctypes.addressof(name))
    struct = (DLManagedTensorVersioned if versioned else DLManagedTensor).from_address(address)
    t = struct.dl_tensor
    t.device = DLDevice(int(device[0]), int(device[1]))
    t.dtype = DLDataType(int(code), bits, 1)
    if byte_offset:
        t.byte_offset = int(byte_offset)
    if versioned and copied:
        struct.flags |= IS_COPIED
    return capsule


class Foreign:
    """Whose memory a buffer wraps (``Buffer.foreign``): the DLPack device it was exported from, the producing
    library's name, and the consumed capsule, released when the last reference to the memory goes."""

    __slots__ = ("device", "managed", "owner_name")

    def __init__(self, device: Sequence[int], owner_name: str, managed: Any) -> None:
        self.device = (int(device[0]), int(device[1]))
        self.owner_name = owner_name
        self.managed = managed

    def __repr__(self) -> str:
        return f"<Foreign {device_name(self.device)} memory of {self.owner_name}>"

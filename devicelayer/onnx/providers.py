"""Execution providers as onnxruntime names them, mapped to devicelayer devices.

A provider is a devicelayer device id (``"cuda:0"``, ``"host"``), ``"auto"`` (every device, in preference order),
or one of onnxruntime's names: ``CPUExecutionProvider`` is the host, ``CUDAExecutionProvider`` (and TensorRT's)
the CUDA device of its ``device_id`` option (0 by default), ROCm's and MIGraphX's the ROCm device.  Devices are
found by the DLPack kind of their memory, which each backend states, so no backend is named here.  An
onnxruntime provider that has no device on this machine is skipped with a warning, as onnxruntime does; a name
that is neither a device nor a provider is an error listing what exists.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..device import Device
from ..dlpack import DLDeviceType
from ..errors import DeviceLayerError, InvalidArgument

#: onnxruntime providers devicelayer runs, by the DLPack device type of the memory they compute in (the first
#: of each kind is the one ``get_available_providers`` lists; onnxruntime's order: GPUs first)
PROVIDER_MEMORY = {
    "CUDAExecutionProvider": DLDeviceType.kDLCUDA,
    "ROCMExecutionProvider": DLDeviceType.kDLROCM,
    "CPUExecutionProvider": DLDeviceType.kDLCPU,
    "TensorrtExecutionProvider": DLDeviceType.kDLCUDA,
    "MIGraphXExecutionProvider": DLDeviceType.kDLROCM,
    "DnnlExecutionProvider": DLDeviceType.kDLCPU,
    "XnnpackExecutionProvider": DLDeviceType.kDLCPU,
}

#: the other providers onnxruntime knows (skipped with a warning: no devicelayer device is one of them)
OTHER_PROVIDERS = ("OpenVINOExecutionProvider", "VitisAIExecutionProvider", "QNNExecutionProvider",
                   "NnapiExecutionProvider", "VSINPUExecutionProvider", "JsExecutionProvider",
                   "CoreMLExecutionProvider", "DmlExecutionProvider", "RknpuExecutionProvider",
                   "WebNNExecutionProvider", "WebGpuExecutionProvider", "CANNExecutionProvider",
                   "AzureExecutionProvider", "ACLExecutionProvider", "ArmNNExecutionProvider")

#: onnxruntime's device names (IOBinding, OrtValue) by DLPack device type
DEVICE_NAMES = {"cpu": DLDeviceType.kDLCPU, "cuda": DLDeviceType.kDLCUDA, "gpu": DLDeviceType.kDLCUDA}


@dataclass
class Provider:
    """One provider of a session: the name it was asked by, its device, its options (as strings)."""

    name: str
    device: Device
    options: dict[str, str] = field(default_factory=dict)


def _every() -> list[Device]:
    from ..registry import devices

    return devices()


def device_by_memory(kind: int, index: int) -> Device | None:
    """The device whose memory is of DLPack device (``kind``, ``index``), None when there is none."""
    for dev in _every():
        if tuple(dev.pool.dlpack_device()) == (int(kind), int(index)):
            return dev
    return None


def available_providers() -> list[str]:
    """onnxruntime provider names that have a device here, then every device id."""
    first: dict[int, str] = {}
    for name, kind in PROVIDER_MEMORY.items():
        first.setdefault(kind, name)
    names = [name for kind, name in first.items() if device_by_memory(kind, 0) is not None]
    return names + [dev.id for dev in _every()]


def _known() -> str:
    return (f"devices {[d.id for d in _every()]}, 'auto', or onnxruntime's {sorted(PROVIDER_MEMORY)} (mapped to "
            f"those devices)")


def _device_id(name: str, options: Mapping[str, Any]) -> int:
    value = options.get("device_id", 0)
    try:
        index = int(value)
    except (TypeError, ValueError):
        raise InvalidArgument(f"provider {name!r}: device_id must be an int, got {value!r}") from None
    if index < 0:
        raise InvalidArgument(f"provider {name!r}: device_id must be >= 0, got {index}")
    return index


def resolve(providers: Any, provider_options: Any = None) -> list[Provider]:
    """The providers of a session, in order of preference, each with its device (see the module's text)."""
    from ..registry import device as find

    if providers is None or (isinstance(providers, str) and providers == "auto"):
        return [Provider(dev.id, dev) for dev in _every()]
    if isinstance(providers, (str, Device)):
        providers = [providers]
    if not isinstance(providers, Sequence):
        raise InvalidArgument(f"providers must be a list of provider names or device ids, got "
                              f"{type(providers).__name__}")
    if provider_options is not None:
        if not isinstance(provider_options, Sequence) or len(provider_options) != len(providers):
            raise InvalidArgument("provider_options must be a list of dicts, one per provider")
        if not all(isinstance(p, (str, Device)) for p in providers):
            raise InvalidArgument("with provider_options, providers must be names only (not (name, options) pairs)")
        providers = list(zip(providers, provider_options))
    chosen: list[Provider] = []
    for entry in providers:
        name, options = (entry if isinstance(entry, tuple) and len(entry) == 2 else (entry, {}))
        if isinstance(name, Device):
            name = name.id
        if not isinstance(name, str) or not isinstance(options, Mapping):
            raise InvalidArgument(f"a provider is a name or (name, options dict), got {entry!r}")
        options = {str(k): str(v) for k, v in options.items()}
        if name == "auto":
            devices = _every()
        elif name in PROVIDER_MEMORY:
            dev = device_by_memory(PROVIDER_MEMORY[name], _device_id(name, options))
            if dev is None:
                warnings.warn(f"provider {name!r} has no device here (device_id {_device_id(name, options)}); "
                              f"skipped. Devices: {[d.id for d in _every()]}", stacklevel=3)
                continue
            devices = [dev]
        elif name in OTHER_PROVIDERS:
            warnings.warn(f"provider {name!r} is not one devicelayer runs; skipped. Available: "
                          f"{available_providers()}", stacklevel=3)
            continue
        else:
            try:
                devices = [find(name)]
            except DeviceLayerError as exc:
                raise InvalidArgument(f"unknown provider {name!r} ({exc}); providers are {_known()}") from None
        for dev in devices:
            if all(p.device is not dev for p in chosen):
                chosen.append(Provider(name if name != "auto" else dev.id, dev, options))
    if not chosen:
        raise InvalidArgument(f"none of the providers {[p if isinstance(p, str) else p[0] for p in providers]} has a "
                              f"device here; providers are {_known()}")
    return chosen


def device_named(device_type: Any, device_id: Any = 0) -> Device:
    """The device an onnxruntime device name means (``"cpu"``, ``"cuda"`` with ``device_id``), or a devicelayer
    device (or id) as is."""
    from ..registry import device as find

    if isinstance(device_type, Device):
        return device_type
    if not isinstance(device_type, str):
        raise InvalidArgument(f"device_type must be a name such as 'cpu', 'cuda' or a device id, got {device_type!r}")
    kind = DEVICE_NAMES.get(device_type.lower())
    if kind is None:
        try:
            return find(device_type)
        except DeviceLayerError as exc:
            raise InvalidArgument(f"unknown device {device_type!r} ({exc}); devices are {[d.id for d in _every()]} "
                                  f"or onnxruntime's {sorted(DEVICE_NAMES)}") from None
    try:
        index = int(device_id)
    except (TypeError, ValueError):
        raise InvalidArgument(f"device_id must be an int, got {device_id!r}") from None
    dev = device_by_memory(kind, index)
    if dev is None:
        raise InvalidArgument(f"no {device_type}:{index} device here; devices are {[d.id for d in _every()]}")
    return dev

"""DeviceInfo: the constant capabilities of one device."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

#: dtype names used in ``DeviceInfo.dtypes`` and kernel signatures.
DTYPE_NAMES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
               "uint64", "float16", "bfloat16", "float32", "float64")

#: kernel languages a device may compile (``DeviceInfo.kernel_language``).
KERNEL_LANGUAGES = ("python", "opencl-c", "glsl", "cuda-c")


@dataclass(frozen=True)
class DeviceInfo:
    """What a device is and can do; constant for the device's life (free memory is live: ``pool.free_bytes``)."""

    id: str  # "opencl:1", "vulkan:0"; a backend with one device may use its bare name
    backend: str
    index: int
    name: str
    vendor: str
    device_type: str  # "cpu", "gpu", "accelerator" or "other"
    driver_version: str
    api_version: str
    kernel_language: str
    memory_total: int
    max_allocation: int
    compute_units: int
    max_work_group_size: int
    max_work_item_sizes: tuple[int, ...]
    subgroup_size: int | None
    local_memory: int
    dtypes: frozenset[str]
    unified_memory: bool
    view_alignment: int = 1
    max_work_groups: tuple[int, ...] = (2**31 - 1, 65535, 65535)  # work-groups per launch, per dimension
    max_global_items: int = 2**64 - 1  # work items one launch may have in all (OpenCL: the device's size_t)
    peer_access: tuple[str, ...] = ()
    timestamps: bool = False
    extras: Mapping[str, Any] = field(default_factory=dict)

    def supports(self, dtype: str) -> bool:
        """True when the device can store and compute with ``dtype``."""
        return str(dtype) in self.dtypes

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        d = asdict(self)
        d["dtypes"] = sorted(self.dtypes, key=_dtype_order)
        d["max_work_item_sizes"] = list(self.max_work_item_sizes)
        d["max_work_groups"] = list(self.max_work_groups)
        d["peer_access"] = list(self.peer_access)
        d["extras"] = {k: v for k, v in self.extras.items()}
        return d


def _dtype_order(name: str) -> int:
    return DTYPE_NAMES.index(name) if name in DTYPE_NAMES else len(DTYPE_NAMES)

"""DeviceInfo: the constant capabilities of one device."""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator, Mapping

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
    #: (operand dtype, accumulator dtype, M, N, K) of each M x K by K x N multiply-add a subgroup runs on the
    #: device's matrix units, for kernels that use them (the tiled GEMM's and convolution's MMA form)
    matrix_units: tuple[tuple[str, str, int, int, int], ...] = ()
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
        d["matrix_units"] = [list(u) for u in self.matrix_units]
        d["extras"] = {k: v for k, v in self.extras.items()}
        return d


class LazyExtras(Mapping[str, Any]):
    """``DeviceInfo.extras`` whose slow part (``more``, a callable giving further keys: a management library's
    clocks and power) is read the first time a key outside ``known`` is looked up, or the whole is iterated;
    a copy or pickle is a plain dict of everything."""

    def __init__(self, known: Mapping[str, Any], more: Callable[[], Mapping[str, Any]]) -> None:
        self._known = dict(known)
        self._more: Callable[[], Mapping[str, Any]] | None = more
        self._lock = threading.Lock()

    def _complete(self) -> dict[str, Any]:
        if self._more is not None:
            with self._lock:
                if self._more is not None:
                    for k, v in self._more().items():
                        self._known.setdefault(k, v)
                    self._more = None
        return self._known

    def __getitem__(self, key: str) -> Any:
        try:
            return self._known[key]
        except KeyError:
            return self._complete()[key]

    def __contains__(self, key: object) -> bool:
        return key in self._known or key in self._complete()

    def __iter__(self) -> Iterator[str]:
        return iter(dict(self._complete()))

    def __len__(self) -> int:
        return len(self._complete())

    def __repr__(self) -> str:
        return repr(self._complete())

    def __reduce__(self) -> tuple[Any, ...]:
        return dict, (dict(self._complete()),)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        import copy

        return copy.deepcopy(self._complete(), memo)


def _dtype_order(name: str) -> int:
    return DTYPE_NAMES.index(name) if name in DTYPE_NAMES else len(DTYPE_NAMES)

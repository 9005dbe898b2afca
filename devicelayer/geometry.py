"""Launch geometry: global and local sizes checked against every limit the device states, before a backend sees them.

A driver handed a size beyond its limits may refuse it, or may crash; a kernel handed more work items than
its 32-bit index reaches writes before its buffers.  So every launch, recorded or not, is checked here.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from .errors import InvalidArgument
from .info import DeviceInfo
from .signature import check_size

#: the most work items of one dimension of a launch, on every device: kernels index work items with 32-bit ints
#: (the kernel dialect's ``GID``, ``int i = get_global_id(0)``), and a global id past this wraps negative and
#: reaches memory before the buffer; larger ranges loop inside the kernel
MAX_GLOBAL_EXTENT = 2**31 - 1

Sizes = tuple[int, ...]


def check_geometry(info: DeviceInfo, global_size: Any, local_size: Any,
                   default_local: Callable[[Any, Sizes], Sizes | None], program: Any,
                   where: str) -> tuple[Sizes, Sizes | None]:
    """``(global, local)`` as tuples, or InvalidArgument naming the size and the limit it exceeds.

    ``default_local(program, global)`` is the work-group size the backend gives a launch of ``program`` without
    ``local_size`` (None where the driver picks one that divides the global size); the work-group counts are
    checked with it.
    """
    if type(global_size) is int and local_size is None and 0 < global_size <= MAX_GLOBAL_EXTENT \
            and global_size <= info.max_global_items:  # the common case, 1-D with the backend's work-group size
        gsize = (global_size,)
        if global_size <= info.max_work_groups[0]:
            return gsize, None  # no work-group size makes more work-groups than work items
        group = default_local(program, gsize)
        if group is None or (-(-global_size // group[0]) <= info.max_work_groups[0]
                             and _group_fits(info.max_work_item_sizes, info.max_work_group_size, tuple(group))):
            return gsize, None
    gsize = check_size(global_size, "global_size")
    _check_dims(info, gsize, "global_size", where)
    total = 1
    for axis, g in enumerate(gsize):
        if g > MAX_GLOBAL_EXTENT:
            raise InvalidArgument(f"{where}: global_size {gsize} has {g} work items in dimension {axis}, more than "
                                  f"{MAX_GLOBAL_EXTENT} (kernels index work items with 32-bit ints); loop inside "
                                  f"the kernel over larger ranges")
        total *= g
    if total > info.max_global_items:
        raise InvalidArgument(f"{where}: global_size {gsize} has {total} work items, more than the "
                              f"{info.max_global_items} one launch of {info.id} can index")
    lsize = None
    if local_size is not None:
        lsize = check_size(local_size, "local_size", info.max_work_item_sizes)
        if len(lsize) != len(gsize):
            raise InvalidArgument(f"{where}: local_size {lsize} and global_size {gsize} differ in dimensions")
        if any(g % s for g, s in zip(gsize, lsize)):
            raise InvalidArgument(f"{where}: global_size {gsize} is not a multiple of local_size {lsize}")
        group = lsize
    else:
        group = default_local(program, gsize)
        if group is None:
            return gsize, None
    _check_group(info, group, "local_size" if lsize is not None else "the kernel's work-group size", where)
    groups = tuple(-(-g // s) for g, s in zip(gsize, group))
    for axis, (n, cap) in enumerate(zip(groups, info.max_work_groups)):
        if n > cap:
            raise InvalidArgument(f"{where}: global_size {gsize} in work-groups of {tuple(group)} makes {groups} "
                                  f"work-groups, more than the device's {tuple(info.max_work_groups)} in dimension "
                                  f"{axis}; use larger work-groups or fewer work items")
    return gsize, lsize


def _check_dims(info: DeviceInfo, size: Sizes, what: str, where: str) -> None:
    if len(size) > len(info.max_work_item_sizes):
        raise InvalidArgument(f"{where}: {what} {size} has {len(size)} dimensions, {info.id} has "
                              f"{len(info.max_work_item_sizes)}")


@functools.lru_cache(maxsize=256)
def _group_fits(sizes: Sizes, max_items: int, group: Sizes) -> bool:
    """Whether a work-group is within the per-dimension ``sizes`` and ``max_items`` work items (cached: launches
    without a local size get the same few groups)."""
    items = 1
    for d in group:
        items *= d
    return len(group) <= len(sizes) and items <= max_items and all(d <= cap for d, cap in zip(group, sizes))


def _check_group(info: DeviceInfo, group: Sizes, what: str, where: str) -> None:
    """A work-group within the device's per-dimension sizes and its work items per group."""
    _check_dims(info, group, what, where)
    for axis, (d, cap) in enumerate(zip(group, info.max_work_item_sizes)):
        if d > cap:
            raise InvalidArgument(f"{where}: {what} {tuple(group)} exceeds the device's limit "
                                  f"{tuple(info.max_work_item_sizes)} in dimension {axis}")
    items = 1
    for d in group:
        items *= d
    if items > info.max_work_group_size:
        raise InvalidArgument(f"{where}: {what} {tuple(group)} has more than the device's "
                              f"{info.max_work_group_size} work items per group")

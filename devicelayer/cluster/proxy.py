"""A device of a cluster node as the driver sees it: its id, its DeviceInfo and its free memory, no more."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..info import DeviceInfo
from .naming import qualify


class RemotePool:
    """The memory figures of a remote device's pool, as its node last reported them."""

    def __init__(self, free_bytes: int, total_bytes: int) -> None:
        self.free_bytes = free_bytes
        self.total_bytes = total_bytes

    def __repr__(self) -> str:
        return f"<RemotePool free={self.free_bytes} total={self.total_bytes}>"


class RemoteDevice:
    """A device of a cluster node: ``id`` is node-qualified, ``info`` is the DeviceInfo its node reports (with
    that id), ``node`` the node's name and ``local_id`` the id on its node.  Placement takes it as a Device; its
    memory and kernels stay on its node."""

    def __init__(self, node: str, info: DeviceInfo, free_bytes: int, total_bytes: int, owner: Any) -> None:
        self.node = node
        self.local_id = info.id
        self.id = qualify(node, info.id)
        self.info = replace(info, id=self.id)
        self.pool = RemotePool(free_bytes, total_bytes)
        self._owner = owner  # the connection that made it

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemoteDevice) and other.id == self.id and other._owner is self._owner

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"<RemoteDevice {self.id}: {self.info.name}>"

"""Devices of other machines, as the graph executor sees them: a hook a higher layer fills in.

A device id with a node prefix (``"<node>/<local id>"``) names a device of a
cluster node.  The graph executor does not know how to reach one: a layer above
it (``devicelayer.cluster``) installs a ``RemoteProvider`` when it connects, and
``Graph.compile`` hands it every compile whose devices include a remote one.
Placement works on remote devices unchanged: they carry ``id``, ``info`` (a
DeviceInfo) and ``pool.free_bytes``, like a local Device.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

from ..device import Device
from ..errors import DeviceNotFound

#: what separates the node from the local device id in a node-qualified id
SEPARATOR = "/"


class RemoteProvider(Protocol):
    """What a cluster layer gives the graph executor."""

    def resolve(self, id: str) -> Any:
        """The remote device of a node-qualified id (DeviceNotFound for an unknown node or device)."""

    def is_remote(self, device: Any) -> bool:
        """True for a remote device this provider made."""

    def compile(self, graph: Any, devices: Sequence[Any], placement: Any, strict: bool, policy: str,
                record: bool, constants: Any, fuse: bool, parallel: str, timeout: float | None) -> Any:
        """A plan of ``graph`` over ``devices`` (remote ones among them)."""


_provider: RemoteProvider | None = None


def install(provider: RemoteProvider | None) -> None:
    """Make ``provider`` the way to remote devices (None: none, as before any cluster was connected)."""
    global _provider
    _provider = provider


def provider() -> RemoteProvider | None:
    """The installed provider, or None."""
    return _provider


def is_qualified(id: Any) -> bool:
    """True for a string id with a node prefix (``"<node>/<local id>"``)."""
    return isinstance(id, str) and SEPARATOR in id


def is_remote(device: Any) -> bool:
    """True for a device of a cluster node (made by the installed provider)."""
    return _provider is not None and not isinstance(device, Device) and _provider.is_remote(device)


def resolve(id: Any) -> Any:
    """A local Device, or the remote device of a node-qualified id (through the installed provider)."""
    from ..registry import device as local

    if is_qualified(id):
        if _provider is None:
            raise DeviceNotFound(f"no device {id!r}: a node-qualified id needs a cluster; connect first with "
                                 "devicelayer.cluster.connect()")
        return _provider.resolve(id)
    if _provider is not None and not isinstance(id, (str, Device)) and _provider.is_remote(id):
        return id
    return local(id)

"""Node names and node-qualified device ids (``"<node>/<local id>"``).

A node's name is the shortest prefix of Ray's hex node id, 8 characters at
least, that no other node shares: short, and stable for the node's life.
"""

from __future__ import annotations

from typing import Iterable

from ..errors import DeviceNotFound, InvalidArgument
from ..graph.remote import SEPARATOR

SHORTEST = 8


def short_names(node_ids: Iterable[str]) -> dict[str, str]:
    """Node id -> its short name (unique among ``node_ids``)."""
    ids = list(dict.fromkeys(node_ids))
    names = {}
    for node_id in ids:
        length = SHORTEST
        while length < len(node_id) and any(o != node_id and o[:length] == node_id[:length] for o in ids):
            length += 1
        names[node_id] = node_id[:length]
    return names


def qualify(node: str, local_id: str) -> str:
    """The node-qualified id of device ``local_id`` of ``node``."""
    return f"{node}{SEPARATOR}{local_id}"


def split(id: object) -> tuple[str, str]:
    """(node, local id) of a node-qualified id; InvalidArgument for what is not a string, DeviceNotFound for a
    malformed id."""
    if not isinstance(id, str) or not id:
        raise InvalidArgument(f"device: expected a node-qualified id such as '<node>/<local id>', got {id!r}")
    node, sep, local = id.partition(SEPARATOR)
    if not sep or not node or not local or SEPARATOR in local or node != node.strip() or local != local.strip():
        raise DeviceNotFound(f"device id {id!r} is malformed: expected NODE/LOCAL_ID, as '<node>/<local id>'")
    return node, local

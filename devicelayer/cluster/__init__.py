"""The graph executor over a Ray cluster: one actor per node owns that node's devices.

``connect(address=None, **ray_init_kwargs)`` joins a cluster (or starts a local
one); ``devices()`` lists the devices of every node with node-qualified ids
(``"<node>/<local id>"``); ``device(id)`` gives one.  ``Graph.compile`` then
takes those ids: ``parallel="model"`` splits the graph over the nodes,
``parallel="data"`` splits the batch.  Ray is an optional extra
(``pip install 'devicelayer[cluster]'``): importing this package works without
it, and every call raises ``BackendUnavailable`` with that hint.
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "connect": "connection", "disconnect": "connection", "nodes": "connection", "devices": "connection",
    "device": "connection", "current": "connection", "Connection": "connection", "NodeState": "connection",
    "RemoteDevice": "proxy", "ClusterPlan": "plans", "ClusterRun": "plans", "ModelPlan": "plans",
    "DataPlan": "plans", "short_names": "naming", "INSTALL_HINT": "engine",
}


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'devicelayer.cluster' has no attribute {name!r}")
    if module != "engine":
        from .engine import ray

        ray()  # BackendUnavailable, with the install hint, where Ray is missing
    return getattr(importlib.import_module(f".{module}", __name__), name)


__all__ = sorted(_PUBLIC)

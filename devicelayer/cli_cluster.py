"""``devicelayer info --cluster [ADDRESS]``: every node's devices, with node-qualified ids."""

from __future__ import annotations

import json
import sys
from typing import Any

from . import __version__
from .cli import _print_table, device_document

#: version of the ``info --cluster --json`` schema
CLUSTER_SCHEMA = "devicelayer.cluster-info/1"


def cluster_document(address: str | None) -> dict[str, Any]:
    """Join the cluster at ``address`` (None: the one Ray finds, else a local one), list every node, leave."""
    from . import cluster

    conn = cluster.connect(address)
    try:
        nodes = conn.nodes_now()
        return {"schema": CLUSTER_SCHEMA, "version": __version__, "address": address, "nodes": [
            {"name": n.name, "node_id": n.node_id, "address": n.address, "hostname": n.hostname,
             "version": n.version,
             "devices": [device_document(d.info, d.pool.free_bytes) for d in n.devices],
             "unavailable": [{"backend": b, "reason": r} for b, r in n.unavailable]} for n in nodes]}
    finally:
        cluster.disconnect()


def info(address: str | None, as_json: bool) -> int:
    """Print the cluster's devices (a table per node, or JSON); exit status 2 where it cannot be reached."""
    from .errors import DeviceLayerError

    try:
        doc = cluster_document(address)
    except DeviceLayerError as exc:
        print(f"devicelayer info --cluster: {exc}", file=sys.stderr)
        return 2
    if as_json:
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    for n in doc["nodes"]:
        _print_table({"version": doc["version"], "devices": n["devices"], "unavailable": n["unavailable"]},
                     title=f"node {n['name']} ({n['hostname']}, {n['address']}, devicelayer {n['version']})")
    return 0

"""A Ray cluster of several nodes on this machine for the cluster tests (``ray.cluster_utils.Cluster``).

Each node is its own raylet with its own object store, all on 127.0.0.1; a
node's ``DEVICELAYER_BACKENDS`` (given to its raylet, so to the actor that
owns its devices) says which backends that node has.
"""

from __future__ import annotations

import os
from typing import Sequence

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # (conftest sets it before Ray is imported)
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

STORE = 80 * 2**20  # object store bytes per node


def node_args(backends: str) -> dict:
    """The arguments of one small node whose devicelayer sees ``backends``."""
    return {"num_cpus": 1, "object_store_memory": STORE, "node_ip_address": "127.0.0.1",
            "env_vars": {"DEVICELAYER_BACKENDS": backends}}


def start(backends: Sequence[str]):
    """A cluster of ``len(backends)`` nodes (the first the head), each seeing its backends, and devicelayer
    connected to it; returns (cluster, connection, [the nodes' names in ``backends`` order])."""
    from ray.cluster_utils import Cluster

    import devicelayer.cluster as dc

    cluster = Cluster(initialize_head=True, head_node_args={**node_args(backends[0]), "include_dashboard": False})
    handles = [cluster.head_node] + [cluster.add_node(**node_args(b)) for b in backends[1:]]
    cluster.wait_for_nodes()
    try:
        conn = dc.connect(cluster.address, log_to_driver=False, _node_ip_address="127.0.0.1")
    except BaseException:
        cluster.shutdown()
        raise
    by_id = {n.node_id: n.name for n in conn.nodes_now()}
    names = [by_id[h.node_id] for h in handles]
    return cluster, conn, names, handles


def stop(cluster) -> None:
    """Leave and shut the cluster down (every node's actor ended, Ray's processes stopped)."""
    import devicelayer.cluster as dc

    try:
        dc.disconnect()
    finally:
        cluster.shutdown()

"""The actor on each node: it owns that node's ordinary device layer and runs its parts of plans.

One ``NodeWorker`` per node, pinned there; the driver talks to it through Ray
calls only.  A part of a plan is a Graph compiled here into an ordinary
ExecutionPlan of this node's devices, so a node's overhead per run is that of
a plan on one machine.  Inputs arrive as Ray object references (from the
driver or straight from the node that made them) and are fetched here, timed.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any, Sequence

from .engine import ray


class NodeWorker:
    """The devices of one node, and the plan parts compiled on them (by key)."""

    def __init__(self) -> None:
        self._plans: dict[str, Any] = {}

    def describe(self) -> dict[str, Any]:
        """This node's devices (DeviceInfo, free and total bytes), unavailable backends, host and process."""
        import devicelayer

        r = ray()
        devices = [{"info": d.info, "free": d.pool.free_bytes, "total": d.pool.total_bytes}
                   for d in devicelayer.devices()]
        return {"node_id": r.get_runtime_context().get_node_id(), "address": r.util.get_node_ip_address(),
                "hostname": socket.gethostname(), "pid": os.getpid(), "version": devicelayer.__version__,
                "devices": devices, "unavailable": [(u.backend, u.reason) for u in devicelayer.unavailable()]}

    def prepare(self, key: str, graph: Any, devices: Sequence[str], placement: dict[str, str] | None,
                strict: bool, policy: str, record: bool, fuse: bool) -> dict[str, Any]:
        """Compile ``graph`` over this node's ``devices`` as plan part ``key``; its placement and memory reports."""
        plan = graph.compile(list(devices), placement=placement, strict=strict, policy=policy, record=record,
                             fuse=fuse)
        old = self._plans.pop(key, None)
        if old is not None:
            old.release()
        self._plans[key] = plan
        return {"placement": plan.placement_table(), "memory": plan.memory_report(), "transfers": plan.transfers}

    def run(self, key: str, names: Sequence[str], refs: Sequence[Any], profile: bool) -> tuple:
        """Run part ``key`` on the inputs ``names`` (Ray references, fetched here); its outputs in the part's
        order, then a dict of timings: ``waited`` (for the inputs to exist), ``fetched`` (to bring them here),
        ``ran`` (the plan), ``start`` (wall clock), the inputs' ``bytes`` and, profiled, the plan's ``profile``."""
        r = ray()
        plan = self._plans[key]
        start = time.time()
        t0 = time.perf_counter()
        if refs:
            r.wait(list(refs), num_returns=len(refs), fetch_local=False)
        t1 = time.perf_counter()
        arrays = r.get(list(refs)) if refs else []
        t2 = time.perf_counter()
        outputs = plan.run_numpy(dict(zip(names, arrays)), profile=profile)
        t3 = time.perf_counter()
        stats = {"start": start, "waited": t1 - t0, "fetched": t2 - t1, "ran": t3 - t2,
                 "bytes": [int(getattr(a, "nbytes", 0)) for a in arrays], "run_start": t2 - t0}
        if profile:
            stats["profile"] = plan.last_profile
        return (*[outputs[name] for name in getattr(plan, "source_graph", plan.graph).outputs], stats)

    def release(self, key: str) -> None:
        """Free plan part ``key`` (nothing where there is none)."""
        plan = self._plans.pop(key, None)
        if plan is not None:
            plan.release()

    def parts(self) -> list[str]:
        """The keys of the plan parts held here."""
        return sorted(self._plans)

    def ping(self) -> str:
        """This node's id (an answer says the actor is alive)."""
        return ray().get_runtime_context().get_node_id()

"""Joining a Ray cluster: one NodeWorker actor per live node, the devices they report, ids resolved to them."""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..errors import BackendUnavailable, DeviceNotFound, InvalidArgument, NodeError
from ..graph import remote
from .actor import NodeWorker
from .engine import exceptions, on_node, ray
from .naming import qualify, short_names, split
from .proxy import RemoteDevice

#: seconds a node's actor has to start and describe its devices
DESCRIBE_TIMEOUT = 120.0


@dataclass
class NodeState:
    """One live node: its short ``name``, Ray's ``node_id``, ``address`` and ``hostname``, the actor owning its
    devices, the devices it reported and the backends it could not start."""

    name: str
    node_id: str
    address: str
    hostname: str = ""
    actor: Any = None
    devices: list[RemoteDevice] = field(default_factory=list)
    unavailable: list[tuple[str, str]] = field(default_factory=list)
    version: str = ""
    pid: int = 0


class Connection:
    """A joined cluster: its nodes (refreshed on each ``nodes()``/``devices()``/compile), and the provider of
    remote devices to the graph executor (``graph.remote``)."""

    def __init__(self, owns_ray: bool, address: str | None) -> None:
        self.address = address
        self._owns_ray = owns_ray
        self._nodes: dict[str, NodeState] = {}  # node id -> state
        self._names: dict[str, str] = {}  # node id -> name, kept once given
        self._lock = threading.RLock()
        self._plans: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self.closed = False
        self._worker = ray().remote(NodeWorker)

    # -- membership --------------------------------------------------------------------------
    def refresh(self, timeout: float | None = None) -> list[NodeState]:
        """Look at the cluster again: actors for new nodes, dead ones dropped, every node's devices re-read."""
        self._check_open()
        r = ray()
        with self._lock:
            alive = {n["NodeID"]: n for n in r.nodes() if n.get("Alive")}
            for node_id in list(self._nodes):
                if node_id not in alive:
                    self._drop(node_id)
            fresh = [i for i in alive if i not in self._names]
            names = short_names([*self._names, *fresh])
            for node_id in fresh:
                self._names[node_id] = names[node_id]
            for node_id, entry in alive.items():
                if node_id not in self._nodes:
                    self._nodes[node_id] = NodeState(self._names[node_id], node_id,
                                                     entry.get("NodeManagerAddress", ""), actor=self._start(node_id))
            self._describe(timeout or DESCRIBE_TIMEOUT)
            return self.nodes_now()

    def _start(self, node_id: str) -> Any:
        return self._worker.options(scheduling_strategy=on_node(node_id), num_cpus=0).remote()

    def _drop(self, node_id: str) -> None:
        state = self._nodes.pop(node_id)
        try:
            ray().kill(state.actor)
        except Exception:  # noqa: BLE001 - already gone with its node
            pass

    def _describe(self, timeout: float) -> None:
        r, errors = ray(), exceptions()
        pending = {node_id: s.actor.describe.remote() for node_id, s in self._nodes.items()}
        for node_id, ref in pending.items():
            state = self._nodes[node_id]
            try:
                doc = r.get(ref, timeout=timeout)
            except errors.GetTimeoutError:
                raise NodeError(f"node {state.name} ({state.address}): its devicelayer actor did not describe its "
                                f"devices within {timeout:g} s", node=state.name) from None
            except errors.RayActorError:  # the actor died on a live node: start it once more
                state.actor = self._start(node_id)
                try:
                    doc = r.get(state.actor.describe.remote(), timeout=timeout)
                except (errors.RayError, errors.GetTimeoutError) as exc:
                    raise NodeError(f"node {state.name} ({state.address}): its devicelayer actor cannot start: "
                                    f"{exc}", node=state.name) from None
            except errors.RayTaskError as exc:
                raise NodeError(f"node {state.name} ({state.address}): listing its devices failed: "
                                f"{exc.cause if getattr(exc, 'cause', None) else exc}", node=state.name) from None
            state.hostname, state.version, state.pid = doc["hostname"], doc["version"], doc["pid"]
            state.address = doc["address"] or state.address
            state.unavailable = list(doc["unavailable"])
            state.devices = [RemoteDevice(state.name, d["info"], d["free"], d["total"], self) for d in doc["devices"]]

    def nodes_now(self) -> list[NodeState]:
        """The nodes as last refreshed, the driver's first."""
        here = self.driver_node_id()
        return sorted(self._nodes.values(), key=lambda s: (s.node_id != here, s.name))

    def driver_node_id(self) -> str | None:
        """Ray's id of the node this process runs on (None where it runs on none, as a Ray Client)."""
        try:
            return ray().get_runtime_context().get_node_id()
        except Exception:  # noqa: BLE001 - a Ray Client has no node of its own
            return None

    def node(self, name: str) -> NodeState:
        """The node called ``name``; DeviceNotFound, listing the nodes, where none is."""
        for state in self._nodes.values():
            if state.name == name:
                return state
        known = ", ".join(s.name for s in self.nodes_now()) or "none"
        raise DeviceNotFound(f"no node {name!r} in the cluster (nodes: {known})")

    # -- devices ---------------------------------------------------------------------------
    def devices(self) -> list[RemoteDevice]:
        """Every device of every node, nodes in order (the driver's first), each node's in its preference order."""
        return [d for s in self.nodes_now() for d in s.devices]

    def resolve(self, id: str) -> RemoteDevice:
        """The remote device of a node-qualified id (DeviceNotFound for an unknown node or device)."""
        self._check_open()
        name, local = split(id)
        try:
            state = self.node(name)
        except DeviceNotFound:
            self.refresh()  # a node that joined since
            state = self.node(name)
        for d in state.devices:
            if d.local_id == local:
                return d
        if ":" not in local:  # a bare backend name: its first device, as devicelayer.device() takes it
            for d in state.devices:
                if d.info.backend == local:
                    return d
        have = ", ".join(d.id for d in state.devices) or "no devices"
        raise DeviceNotFound(f"no device {id!r}; node {name} has {have}")

    def local_as_remote(self, device: Any) -> RemoteDevice:
        """The device of the driver's node with the id of the local ``device`` (run there by that node's actor)."""
        here = self.driver_node_id()
        if here is None or here not in self._nodes:
            raise DeviceNotFound(f"{device.id} is a device of this machine, which is no node of the cluster; name "
                                 "devices of nodes ('<node>/<local id>')")
        return self.resolve(qualify(self._nodes[here].name, device.id))

    def is_remote(self, device: Any) -> bool:
        """True for a RemoteDevice of this connection."""
        return isinstance(device, RemoteDevice) and device._owner is self

    def compile(self, graph: Any, devices: Sequence[Any], placement: Any, strict: bool, policy: str,
                record: bool, constants: Any, fuse: bool, parallel: str, timeout: float | None) -> Any:
        """A plan of ``graph`` over devices of the cluster (``Graph.compile`` calls this)."""
        from .plans import compile_plan

        self._check_open()
        if constants is not None:
            raise InvalidArgument("compile: constants= shares device copies within one process; a plan over a "
                                  "cluster takes none")
        self.refresh(timeout)  # nodes that left since the ids were resolved are unknown now: DeviceNotFound
        devices = [self.resolve(d.id) if self.is_remote(d) else d for d in devices]
        plan = compile_plan(self, graph, devices, placement, strict, policy, record, fuse, parallel, timeout)
        self._plans.add(plan)
        return plan

    # -- closing ---------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise BackendUnavailable("this cluster connection was closed; devicelayer.cluster.connect() again")

    def close(self) -> None:
        """Release every plan, end every node's actor, and leave Ray (shut down where connect started it)."""
        if self.closed:
            return
        for plan in list(self._plans):
            plan.release()
        for node_id in list(self._nodes):
            self._drop(node_id)
        self.closed = True
        if self._owns_ray:
            ray().shutdown()


_current: Connection | None = None
_lock = threading.Lock()


def connect(address: str | None = None, **ray_init_kwargs: Any) -> Connection:
    """Join the Ray cluster at ``address`` (``"auto"``, ``"host:port"``, ``"ray://host:10001"``), or start a
    local one when None and this process has none; one actor per node then owns its devices.  Where Ray is
    already initialised in this process, call it without arguments: that cluster is used (and left up at
    ``disconnect()``)."""
    global _current
    r = ray()
    with _lock:
        if _current is not None and not _current.closed:
            raise InvalidArgument("devicelayer.cluster is already connected; call devicelayer.cluster.disconnect() "
                                  "first to join another cluster")
        owns = False
        if r.is_initialized():
            if address is not None or ray_init_kwargs:
                raise InvalidArgument("connect: Ray is already initialised in this process; call connect() "
                                      "without arguments to use its cluster")
        else:
            try:
                r.init(address=address, **ray_init_kwargs)
            except TypeError as exc:
                raise InvalidArgument(f"connect: {exc}") from None
            except RuntimeError as exc:
                if "keyword argument" in str(exc):  # ray.init's word for an option it does not take
                    raise InvalidArgument(f"connect: {exc}") from None
                raise BackendUnavailable(f"connect: cannot join a Ray cluster at {address!r}: {exc}") from None
            except (ConnectionError, ValueError) as exc:
                raise BackendUnavailable(f"connect: cannot join a Ray cluster at {address!r}: {exc}") from None
            owns = True
        conn = Connection(owns, address)
        try:
            conn.refresh()
        except BaseException:
            conn.close()
            raise
        _current = conn
        remote.install(conn)
        return conn


def disconnect() -> None:
    """Leave the cluster: every plan over it released, every node's actor ended, Ray shut down where
    ``connect`` started it.  Nothing where not connected."""
    global _current
    with _lock:
        conn, _current = _current, None
        remote.install(None)
    if conn is not None:
        conn.close()


def current() -> Connection:
    """The connection; BackendUnavailable where ``connect()`` has not been called."""
    if _current is None or _current.closed:
        raise BackendUnavailable("not connected to a cluster: call devicelayer.cluster.connect() first")
    return _current


def nodes() -> list[NodeState]:
    """Every live node (looked at again), the driver's first."""
    return current().refresh()


def devices() -> list[RemoteDevice]:
    """Every device of every node, each with its node-qualified id ``"<node>/<local id>"``."""
    conn = current()
    conn.refresh()
    return conn.devices()


def device(id: str) -> RemoteDevice:
    """The device with node-qualified id ``id`` (DeviceNotFound for an unknown node or device)."""
    return current().resolve(id)

"""Backend discovery: entry points of the group ``devicelayer.backends``, devices and their ids."""

from __future__ import annotations

import importlib
import os
import threading
from dataclasses import dataclass
from typing import ClassVar, Iterable, Sequence

from . import entry_points, lifecycle, probe
from .device import Device
from .errors import BackendUnavailable, DeviceNotFound, InvalidArgument

ENTRY_POINT_GROUP = "devicelayer.backends"


class Backend:
    """One vendor API.  ``__init__`` raises ``BackendUnavailable`` (with the reason) when it cannot run here."""

    name: ClassVar[str]
    #: order of preference when the user names none (higher first)
    priority: ClassVar[int] = 0
    #: True when a process forked after the backend started here can start it afresh (False: the driver's state
    #: does not survive a fork, as CUDA's does not, and the child reports the backend unavailable)
    fork_safe: ClassVar[bool] = False

    @classmethod
    def driver_fingerprint(cls) -> Sequence[str] | None:
        """The driver files and settings that decide how starting the backend goes (``devicelayer.probe.stamp``
        of each file, ``NAME=value`` of each setting), where starting it runs native driver code that could crash
        the process: the registry then starts it in a probe process first, again whenever these change.  None
        (the default): no probe."""
        return None

    def devices(self) -> Sequence[Device]:
        """Every usable device of this backend, in a stable order."""
        raise NotImplementedError

    def unavailable_devices(self) -> Sequence[tuple[str, str]]:
        """Devices the backend found but cannot use, as (description, reason)."""
        return ()


@dataclass(frozen=True)
class Unavailable:
    """A backend (or device) that is not usable here, and why."""

    backend: str
    reason: str


class _Registry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loaded: dict[str, Backend] | None = None
        self._unavailable: list[Unavailable] = []
        self._order: list[str] = []
        #: backends started in this process or, before a fork, in a parent: name -> pid of the process
        self._started: dict[str, int] = {}
        self._parents: list[dict[str, Backend]] = []  # what parents loaded (kept: never released in a child)
        #: backends started one at a time (``device(id)`` before any call that needs them all), and why others
        #: could not start; ``load`` starts the rest and keeps these
        self._single: dict[str, Backend] = {}
        self._single_failed: dict[str, list[Unavailable]] = {}

    def after_fork_in_child(self) -> None:
        """In a forked child: load afresh on first use (the parent's devices are unusable here)."""
        if self._loaded is not None:
            self._parents.append(self._loaded)
        if self._single:
            self._parents.append(self._single)
        self._lock = threading.Lock()
        self._loaded = None
        self._unavailable = []
        self._single, self._single_failed = {}, {}

    def _refused_after_fork(self, name: str, cls: type[Backend]) -> str | None:
        """Why ``name`` cannot start in this process: a parent started it before forking this one."""
        pid = self._started.get(name)
        if pid is None or pid == os.getpid() or getattr(cls, "fork_safe", False):
            return None
        return (f"{name} was started in process {pid}, which then forked this one with os.fork(); its driver does "
                f"not work in a forked child.  Use devices in child processes started with multiprocessing's "
                f"'spawn' or 'forkserver' method (multiprocessing.get_context('spawn')), or fork before "
                f"devicelayer starts its backends")

    def _candidates(self) -> dict[str, str]:
        """Backend name -> "module:Class", from entry points, falling back to the bundled backends."""
        found: dict[str, str] = {}
        try:
            from devicelayer import backends as bundled  # the bundled package declares its own
            found.update(getattr(bundled, "BUNDLED", {}))
        except ImportError:
            pass
        for name, value in entry_points.group(ENTRY_POINT_GROUP):
            found[name] = value
        return found

    def requested(self) -> list[str] | None:
        """The backends ``DEVICELAYER_BACKENDS`` names, in its order (None when it is unset or blank: every one);
        InvalidArgument when it names none, or a name no installed backend has."""
        wanted = os.environ.get("DEVICELAYER_BACKENDS", "").strip()
        if not wanted:
            return None
        known = self._candidates()
        valid = ", ".join(sorted(known))
        names = list(dict.fromkeys(n.strip() for n in wanted.split(",") if n.strip()))
        if not names:
            raise InvalidArgument(f"DEVICELAYER_BACKENDS={wanted!r} names no backend; give a comma-separated list "
                                  f"of {valid}, or leave it unset for every backend")
        unknown = [n for n in names if n not in known]
        if unknown:
            raise InvalidArgument(f"DEVICELAYER_BACKENDS={wanted!r}: no backend named "
                                  f"{', '.join(map(repr, unknown))} is installed; the backends are {valid}")
        return names

    def load(self) -> dict[str, Backend]:
        with self._lock:
            if self._loaded is not None:
                return self._loaded
            candidates = self._candidates()
            wanted = self.requested()
            names = wanted if wanted is not None else list(candidates)
            rest = [n for n in names if n not in self._single and n not in self._single_failed]
            started, failed = self._start(rest, candidates)
            loaded = {n: self._single.get(n) or started[n] for n in names if n in self._single or n in started}
            unavailable = [u for n in names for u in self._single_failed.get(n, failed.get(n, []))]
            if wanted is None:
                order = sorted(loaded, key=lambda n: -loaded[n].priority)
            else:
                order = [n for n in names if n in loaded]
            self._loaded = {n: loaded[n] for n in order}
            rank = {n: i for i, n in enumerate(names)}
            self._unavailable = sorted(unavailable, key=lambda u: rank.get(u.backend, len(rank)))
            self._single, self._single_failed = {}, {}
            return self._loaded

    def one(self, name: str) -> tuple[Backend | None, list[Unavailable]]:
        """Backend ``name`` (started alone where the others have not been), or None with why it is unavailable
        (nothing where no installed backend, or none ``DEVICELAYER_BACKENDS`` names, has that name)."""
        with self._lock:
            if self._loaded is None:
                if name in self._single or name in self._single_failed:
                    return self._single.get(name), self._single_failed.get(name, [])
                candidates = self._candidates()
                wanted = self.requested()
                if name not in candidates or (wanted is not None and name not in wanted):
                    return None, []
                started, failed = self._start([name], candidates)
                if name in started:
                    self._single[name] = started[name]
                self._single_failed[name] = failed.get(name, [])
                return started.get(name), self._single_failed[name]
        loaded = self.load()
        return loaded.get(name), [u for u in self._unavailable if u.backend == name]

    def _start(self, names: list[str], candidates: dict[str, str]) -> tuple[dict[str, Backend],
                                                                            dict[str, list[Unavailable]]]:
        """Start the named backends (a probe process first for those whose driver could crash this one): the
        started ones, and per name why it or some of its devices are unavailable."""
        started: dict[str, Backend] = {}
        failed: dict[str, list[Unavailable]] = {n: [] for n in names}
        classes: dict[str, type[Backend]] = {}
        for name in names:
            target = candidates[name]
            try:
                classes[name] = _backend_class(target)
            except BackendUnavailable as exc:
                failed[name].append(Unavailable(name, str(exc)))
            except Exception as exc:  # a broken plugin must not take the others down
                failed[name].append(Unavailable(name, f"failed to start: {type(exc).__name__}: {exc}"))
        refused = {name: why for name, cls in classes.items() if (why := self._refused_after_fork(name, cls))}
        refused.update(probe.verdicts(_probe_requests(classes, candidates, refused)))
        for name, cls in classes.items():
            if name in refused:
                failed[name].append(Unavailable(name, refused[name]))
                continue
            try:
                backend = cls()
                list(backend.devices())  # a backend that cannot list its devices is unusable too
                started[name] = backend
                self._started[name] = os.getpid()
                for what, reason in backend.unavailable_devices():
                    failed[name].append(Unavailable(name, f"{what}: {reason}"))
            except BackendUnavailable as exc:
                failed[name].append(Unavailable(name, str(exc)))
            except Exception as exc:  # a broken plugin must not take the others down
                failed[name].append(Unavailable(name, f"failed to start: {type(exc).__name__}: {exc}"))
        return started, failed

    def reset(self) -> None:
        with self._lock:
            backends, self._loaded = {**self._single, **(self._loaded or {})}, None
            self._single, self._single_failed = {}, {}
        for backend in backends.values():
            for dev in backend.devices():
                try:
                    dev.close()
                except Exception:
                    pass


def _backend_class(target: str) -> type[Backend]:
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BackendUnavailable(f"cannot import {module_name}: {exc}") from exc
    return getattr(module, attr)


def _instantiate(target: str) -> Backend:
    return _backend_class(target)()


def _probe_requests(classes: dict[str, type[Backend]], candidates: dict[str, str],
                    skip: Iterable[str]) -> dict[str, tuple[str, Sequence[str]]]:
    """name -> (target, fingerprint) of the backends to start in a probe process first."""
    requests = {}
    for name, cls in classes.items():
        if name in skip:
            continue
        try:
            fingerprint = cls.driver_fingerprint() if isinstance(cls, type) and issubclass(cls, Backend) else None
        except Exception as exc:  # noqa: BLE001 - a fingerprint that cannot be made: probed, keyed by the error
            fingerprint = [f"fingerprint failed: {type(exc).__name__}: {exc}"]
        if fingerprint is not None:
            requests[name] = (candidates[name], list(fingerprint))
    return requests


_registry = _Registry()
lifecycle.in_forked_child(_registry.after_fork_in_child)


def requested_backends() -> list[str] | None:
    """The backends ``DEVICELAYER_BACKENDS`` names (None: unset, every backend); InvalidArgument, naming the value
    and listing the installed backends, when it names none or one that is not installed.  Every call that loads
    the backends (``devices``, ``device``, ``unavailable``) raises the same."""
    return _registry.requested()


def devices(backends: Iterable[str] | None = None) -> list[Device]:
    """Every device of every backend that initialises, in preference order (``DEVICELAYER_BACKENDS`` restricts and
    orders; InvalidArgument when it names no installed backend)."""
    loaded = _registry.load()
    if backends is not None:
        if isinstance(backends, str):
            backends = [backends]
        backends = list(backends)
        unknown = [b for b in backends if b not in loaded and b not in {u.backend for u in _registry._unavailable}]
        if unknown:
            raise InvalidArgument(f"devices: unknown backend(s) {unknown}; known: {sorted(loaded)}")
        return [d for name in backends if name in loaded for d in loaded[name].devices()]
    return [d for backend in loaded.values() for d in backend.devices()]


def unavailable() -> list[Unavailable]:
    """Backends (or devices) that could not be used, each with its reason (reported, not raised)."""
    _registry.load()
    return list(_registry._unavailable)


def device(id: str | Device) -> Device:
    """The device with this id: ``"host"``, ``"opencl:1"``, ``"vulkan:0"``; a bare backend name means its first
    device.  Only that device's backend is started (the others start when a call needs them)."""
    if isinstance(id, Device):
        return id
    if not isinstance(id, str) or not id:
        raise InvalidArgument(f"device: expected an id such as 'opencl:0', got {id!r}")
    name, _, index_text = id.partition(":")
    if index_text and not index_text.isdigit():
        _registry.requested()  # (a bad DEVICELAYER_BACKENDS is named first, as every loading call names it)
        raise DeviceNotFound(f"device id {id!r} is malformed: expected BACKEND or BACKEND:INDEX")
    index = int(index_text) if index_text else 0
    backend, why = _registry.one(name)  # only this backend is started (the others start when they are asked for)
    if backend is None:
        for u in why:
            if u.backend == name:
                raise BackendUnavailable(f"backend {name!r} is unavailable: {u.reason}")
        loaded = _registry.load()
        raise DeviceNotFound(f"no device {id!r}: no backend named {name!r} (available: {', '.join(loaded) or 'none'})")
    for dev in backend.devices():
        if dev.info.index == index:
            return dev
    ids = [d.id for d in backend.devices()]
    raise DeviceNotFound(f"no device {id!r}; {name} has {', '.join(ids) or 'no devices'}")


def reset() -> None:
    """Close every device and forget the loaded backends; the next call loads them again."""
    _registry.reset()

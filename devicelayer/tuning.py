"""Choices a backend measured once (which algorithm or route runs a layer geometry fastest), kept in the disk cache
so that a later process on the same device, driver and libraries starts from them instead of timing again.

One JSON file per device, driver and library versions (``tuned/<kind>-<hash>.json`` in
``diskcache.cache_dir()``).  A file that is missing, unreadable, of another schema or corrupt counts as
empty; a value that no longer applies is the caller's to reject (it tunes again and stores the new choice).
Writes merge under a file lock with what other processes stored meanwhile, and a cache that cannot be written is
warned of once (``diskcache``): the choice then lives only in this process.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any

from .diskcache import cache_dir, locked, write

#: version of the stored layout; bumped when what a choice means changes
TUNING_SCHEMA = 1


class TunedChoices:
    """The choices of one kind (``"conv"``, say) for one device identity (name, driver and library versions)."""

    def __init__(self, kind: str, identity: str) -> None:
        self.kind = kind
        self.identity = f"{identity}|schema {TUNING_SCHEMA}"
        self._lock = threading.Lock()
        self._entries: dict[str, Any] | None = None
        self._root: Path | None = None

    def path(self) -> Path:
        """The file these choices live in (under the disk cache folder of now)."""
        digest = hashlib.sha256(self.identity.encode()).hexdigest()[:20]
        return cache_dir() / "tuned" / f"{self.kind}-{digest}.json"

    def _read(self, path: Path) -> dict[str, Any]:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError, UnicodeDecodeError):
            return {}
        if not isinstance(data, dict) or data.get("identity") != self.identity:
            return {}
        entries = data.get("entries")
        return entries if isinstance(entries, dict) else {}

    def _current(self) -> dict[str, Any]:
        root = cache_dir()
        if self._entries is None or self._root != root:  # (a process that changes DEVICELAYER_CACHE reads anew)
            self._entries, self._root = self._read(self.path()), root
        return self._entries

    def get(self, key: str) -> Any:
        """The stored choice for ``key``, or None."""
        with self._lock:
            return self._current().get(key)

    def put(self, key: str, value: Any) -> None:
        """Store a JSON-able choice, kept with the choices other processes stored meanwhile."""
        path = self.path()
        with self._lock, locked(path):
            entries = self._read(path)
            entries[key] = value
            self._current().update(entries)
            write(path, json.dumps({"identity": self.identity, "entries": entries}, indent=0).encode())

    def __len__(self) -> int:
        with self._lock:
            return len(self._current())

"""The disk caches (SPIR-V compiled from GLSL, the Vulkan pipeline cache, measured figures, built bundled
models): where they live and how they are written.

A cache only saves time, so one that cannot be written (``DEVICELAYER_CACHE`` naming a file, a read-only or
full disk) never fails the work: the first failure in a process is reported once on stderr, and the process
goes on without the disk cache (once per cache folder, so a process that changes ``DEVICELAYER_CACHE`` hears of each).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from pathlib import Path
from typing import Iterator

try:
    import fcntl
except ImportError:  # (not POSIX) writes stay whole; concurrent read-modify-writes may lose an update
    fcntl = None  # type: ignore[assignment]

_lock = threading.Lock()
#: the cache folders whose write failure has been reported
_warned: set[str] = set()


def cache_dir() -> Path:
    """``$DEVICELAYER_CACHE``, else ``$XDG_CACHE_HOME/devicelayer``, else ``~/.cache/devicelayer``."""
    own = os.environ.get("DEVICELAYER_CACHE")
    if own:
        return Path(own)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "devicelayer"


def write(path: Path, data: bytes) -> bool:
    """Write a cache file whole or not at all (a private temporary file renamed over ``path``); False, after a
    one-time warning on stderr, when it cannot be written."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, path)
        return True
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        _warn_once(path, exc)
        return False


def _warn_once(path: Path, exc: OSError) -> None:
    root = str(cache_dir())
    with _lock:
        if root in _warned:
            return
        _warned.add(root)
    print(f"devicelayer: warning: cannot write the disk cache in {root} ({_why(path, exc)}); going on without "
          "it (set DEVICELAYER_CACHE to a writable folder)", file=sys.stderr)


def _why(path: Path, exc: OSError) -> str:
    """Why ``path`` cannot be written: a file where a folder should be, else the system's reason."""
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if folder.exists() and not folder.is_dir():
        return f"{folder} is a file, not a folder"
    return f"{path.name}: {exc.strerror or exc}"


@contextlib.contextmanager
def locked(path: str | os.PathLike) -> Iterator[None]:
    """Hold an exclusive lock for ``path`` (on ``path.lock``, against other processes and threads) while the
    block reads, changes and writes it back; without the file lock where the folder cannot hold one (the write
    then fails and is warned of)."""
    lock_path = Path(f"{os.fspath(path)}.lock")
    with _thread_lock:
        try:
            lock_path.parent.mkdir(parents=True, exist_ok=True)
            fh = open(lock_path, "a")
        except OSError:
            yield
            return
        with fh:
            if fcntl is not None:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                if fcntl is not None:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


_thread_lock = threading.Lock()  # flock is per open file: threads of one process also take this

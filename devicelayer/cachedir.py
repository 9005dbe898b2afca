"""The folder of devicelayer's disk caches, and writes to it that no other process sees half done.

Several processes may compile the same kernels into one cache folder at once: every file is written
whole to a temporary file of the writer's own and renamed over its name (readers see the old file or the
new one, never a mix), and a file that is read, changed and written back (measured figures) is changed
under an exclusive lock, so that no process's update is lost.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from pathlib import Path
from typing import Iterator

try:
    import fcntl
except ImportError:  # (not POSIX) writes stay atomic; concurrent read-modify-writes may lose an update
    fcntl = None  # type: ignore[assignment]

_serial = itertools.count()


def cache_dir() -> Path:
    """``$DEVICELAYER_CACHE``, else ``$XDG_CACHE_HOME/devicelayer``, else ``~/.cache/devicelayer``."""
    own = os.environ.get("DEVICELAYER_CACHE")
    if own:
        return Path(own)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "devicelayer"


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` as the file ``path``, whole or not at all (OSError when it cannot be written)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.{next(_serial)}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


@contextlib.contextmanager
def locked(path: str | os.PathLike) -> Iterator[None]:
    """Hold an exclusive lock for ``path`` (on ``path.lock``, against other processes and threads) while the
    block reads, changes and writes it back."""
    lock_path = Path(f"{os.fspath(path)}.lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with _thread_lock, open(lock_path, "a") as fh:
        if fcntl is not None:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


_thread_lock = threading.Lock()  # flock is per open file: threads of one process also take this

"""Files the ``devicelayer`` commands read and write: input arrays (.npy or .npz) and output files (saved
outputs, traces), each checked before any work runs and written whole or not at all.

Every failure is a ``FileError`` whose message names the option, the path and the reason, for the command to
print as its one-line usage error.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any, Callable

import numpy as np

#: the first bytes of an .npy file, and of a zip archive (.npz)
_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")


class FileError(Exception):
    """A file given on the command line cannot be read or written; the message says which, where and why."""


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return f"{type(exc).__name__}: {exc}"


def _special(path: Path) -> bool:
    """Whether ``path`` exists and is neither a regular file nor a directory (a device such as /dev/null, a pipe)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def check_writable(path: str | os.PathLike, flag: str) -> None:
    """Refuse, before any work runs, an output path that cannot be written: a directory, a missing or unwritable
    directory, an existing file that is read-only.  (A full disk shows only when writing.)"""
    p = Path(path)
    where = f"{flag} {os.fspath(path)}"
    if p.is_dir():
        raise FileError(f"{where}: is a directory; give the path of a file")
    parent = p.absolute().parent
    if not parent.exists():
        raise FileError(f"{where}: the directory {str(parent)!r} does not exist")
    if not parent.is_dir():
        raise FileError(f"{where}: {str(parent)!r} is not a directory")
    if _special(p):
        try:
            with open(p, "ab"):
                pass
        except OSError as exc:
            raise FileError(f"{where}: cannot write: {_reason(exc)}") from None
        return
    if p.exists() and not os.access(p, os.W_OK):
        raise FileError(f"{where}: the file is read-only")
    probe = _temporary(p)
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    except OSError as exc:
        raise FileError(f"{where}: cannot create files in {str(parent)!r}: {_reason(exc)}") from None
    os.unlink(probe)


def _temporary(path: Path) -> Path:
    return path.absolute().parent / f".{path.name}.{os.getpid()}.part"


def write_whole(path: str | os.PathLike, flag: str, write: Callable[[Any], None]) -> None:
    """Write a file with ``write(file)`` (a binary file object) exactly at ``path``, whole or not at all: into a
    temporary file beside it, renamed over ``path`` once complete (a device or pipe is written in place)."""
    p = Path(path)
    where = f"{flag} {os.fspath(path)}"
    if _special(p):
        try:
            with open(p, "wb") as fh:
                write(fh)
        except OSError as exc:
            raise FileError(f"{where}: cannot write: {_reason(exc)}") from None
        return
    if p.is_dir():
        raise FileError(f"{where}: is a directory; give the path of a file")
    tmp = _temporary(p)
    try:
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666), "wb") as fh:
            write(fh)
        os.replace(tmp, p)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise FileError(f"{where}: cannot write: {_reason(exc)}") from None


def read_array(path: str, name: str, where: str) -> np.ndarray:
    """The array in an .npy file, or in an .npz holding one array or one named ``name``; FileError (its message
    beginning with ``where``) for a missing, unreadable, truncated or corrupt file, pickled objects, or an .npz
    without the array."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(_NPY_MAGIC))
            fh.seek(0)
            if head.startswith(_NPY_MAGIC):
                arr = np.load(fh, allow_pickle=False)
            elif head[:4] in _ZIP_MAGIC:
                arr = _from_npz(fh, name, where)
            elif not head:
                raise FileError(f"{where}: the file is empty")
            else:
                raise FileError(f"{where}: not an .npy or .npz file")
    except FileError:
        raise
    except Exception as exc:  # noqa: BLE001 - NumPy, zipfile and zlib raise many kinds for a damaged file
        if "allow_pickle" in str(exc):
            raise FileError(f"{where}: holds pickled Python objects, which are not loaded (numbers only)") from None
        raise FileError(f"{where}: cannot read it: {_reason(exc)}") from None
    if arr.dtype.hasobject:
        raise FileError(f"{where}: holds Python objects, not numbers")
    return arr


def _from_npz(fh: Any, name: str, where: str) -> np.ndarray:
    with np.load(fh, allow_pickle=False) as archive:
        names = list(archive.files)
        if name in names:
            return archive[name]
        if len(names) == 1:
            return archive[names[0]]
        if not names:
            raise FileError(f"{where}: the .npz holds no array")
        raise FileError(f"{where}: the .npz holds arrays {names}, none named {name!r}; give an .npz holding one "
                        f"array or one named {name!r}")

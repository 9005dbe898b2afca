"""oneDNN on an OpenMP runtime of its own: libgomp and libdnnl copied under another name for libgomp.

GNU libgomp counts the threads it manages across every team of the process, and once that count passes the
CPUs it lets a waiting thread spin only about 100 times before it sleeps in the kernel. PyTorch's wheels load
``libgomp.so.1`` into the process's global scope and keep a team of one thread per CPU from their first parallel
op on; a oneDNN linked to the same ``libgomp.so.1`` then shares that runtime, the count doubles, and every
barrier in every primitive sleeps and wakes: the host ran SqueezeNet, MobileNetV2 and BERT 2.1-2.4x slower on
the 2-core VM, and 2-4x slower on the H200 machine's 16 cores, after one PyTorch op in the process.

So oneDNN runs on a copy of its own (``load``): ``libgomp.so.1`` copied with its soname changed to
``libgomp.dl.1``, and ``libdnnl.so.3`` copied with its need for ``libgomp.so.1`` renamed the same way (same
length, patched in each file's dynamic string table, where the soname, the needed entry and the symbol versions'
file names live), both kept in the disk cache; copies whose originals are gone or changed are removed when a new
pair is made. The copy of libgomp is loaded first, by its path; then libdnnl
with ``RTLD_DEEPBIND``, so its OpenMP calls bind to the copy even where another libgomp is in the global scope.
Its threads are devicelayer's alone, whatever else the process loads, before or after.
``DEVICELAYER_PRIVATE_OPENMP=0`` loads oneDNN as it is.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

from devicelayer import diskcache

from .omp import _OFF

RUNTIME = b"libgomp.so.1"
OWN = b"libgomp.dl.1"  # the copy's soname: as long as RUNTIME's
SOURCES = "sources.json"  # a copy's originals: [path, size, modification time in ns] each
_DEFAULT_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
                 "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")
_kept: list[ctypes.CDLL] = []  # the loaded copies of libgomp (never unloaded)


def wanted() -> bool:
    """Whether oneDNN should get a runtime of its own (``DEVICELAYER_PRIVATE_OPENMP`` is not 0)."""
    return os.environ.get("DEVICELAYER_PRIVATE_OPENMP", "").strip().lower() not in _OFF


def dynamic_strings(data: bytes) -> tuple[int, int] | None:
    """(offset, size) of a 64-bit little-endian ELF file's ``.dynstr`` section; None for anything else."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if not shoff or shentsize < 64 or shstrndx >= shnum or shoff + shnum * shentsize > len(data):
        return None

    def section(i: int) -> tuple[int, int, int, int]:
        name, kind, _, _, offset, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        return name, kind, offset, size
    _, _, names_at, names_size = section(shstrndx)
    for i in range(shnum):
        name, kind, offset, size = section(i)
        end = data.find(b"\0", names_at + name, names_at + names_size)
        if kind == 3 and end > 0 and data[names_at + name:end] == b".dynstr" and offset + size <= len(data):
            return offset, size
    return None


def renamed(data: bytes, old: bytes = RUNTIME, new: bytes = OWN) -> bytes | None:
    """``data`` (an ELF file) with every whole string ``old`` in its dynamic string table replaced by ``new`` (of
    the same length); None where the table holds no such string or the file is no 64-bit little-endian ELF."""
    if len(old) != len(new):
        raise ValueError("the names must be of one length")
    found = dynamic_strings(data)
    if found is None:
        return None
    start, size = found
    table = bytearray(data[start:start + size])
    at, hits = table.find(old + b"\0"), 0
    while at >= 0:
        if at == 0 or table[at - 1] == 0:
            table[at:at + len(old)] = new
            hits += 1
        at = table.find(old + b"\0", at + 1)
    if not hits:
        return None
    return data[:start] + bytes(table) + data[start + size:]


def runtime_file(near: str) -> str | None:
    """The ``libgomp.so.1`` the loader would give a library in folder ``near``: that folder, $LD_LIBRARY_PATH,
    the loader's cache (``ldconfig -p``), the default folders."""
    name = RUNTIME.decode()
    folders = [near, *filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(":"))]
    try:
        listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
        folders += [os.path.dirname(line.rsplit("=>", 1)[1].strip()) for line in listing.splitlines()
                    if line.strip().startswith(name + " ") and "=>" in line]
    except (OSError, subprocess.SubprocessError):
        pass
    folders += _DEFAULT_DIRS
    for folder in dict.fromkeys(folders):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return os.path.realpath(path)
    return None


def _copies(dnnl: str) -> tuple[Path, Path] | None:
    """The patched copies of libgomp and of ``dnnl`` in the disk cache (made once per pair of files); None where
    ``dnnl`` does not need ``libgomp.so.1``, no libgomp is found or the cache cannot be written."""
    dnnl = os.path.realpath(dnnl)
    gomp = runtime_file(os.path.dirname(dnnl))
    if gomp is None:
        return None
    sources = [_stat(p) for p in (dnnl, gomp)]
    key = hashlib.sha256(repr([tuple(s) for s in sources]).encode()).hexdigest()[:16]
    folder = diskcache.cache_dir() / "openmp" / key
    gomp_copy, dnnl_copy = folder / OWN.decode(), folder / os.path.basename(dnnl)
    if gomp_copy.is_file() and dnnl_copy.is_file():
        return gomp_copy, dnnl_copy
    with diskcache.locked(folder):
        if gomp_copy.is_file() and dnnl_copy.is_file():
            return gomp_copy, dnnl_copy
        new_dnnl = renamed(Path(dnnl).read_bytes())
        new_gomp = renamed(Path(gomp).read_bytes()) if new_dnnl is not None else None
        if new_gomp is None or not diskcache.write(gomp_copy, new_gomp) or not diskcache.write(dnnl_copy, new_dnnl):
            return None
        diskcache.write(folder / SOURCES, json.dumps(sources).encode())
    prune(folder.parent)
    return gomp_copy, dnnl_copy


def _stat(path: str) -> list:
    s = os.stat(path)
    return [path, s.st_size, s.st_mtime_ns]


def prune(root: Path) -> list[Path]:
    """Remove the copies under ``root`` whose originals are gone or changed (an upgraded oneDNN or libgomp leaves
    54 MB behind otherwise); the folders removed.  A process still running a removed copy keeps its mapping."""
    removed = []
    for folder in root.iterdir() if root.is_dir() else ():
        try:
            sources = json.loads((folder / SOURCES).read_text())
            stale = any(not os.path.exists(p) or _stat(p) != [p, size, mtime] for p, size, mtime in sources)
        except (OSError, ValueError, TypeError):
            continue  # (not a copy's folder, or one being written)
        if stale:
            shutil.rmtree(folder, ignore_errors=True)
            Path(f"{folder}.lock").unlink(missing_ok=True)
            removed.append(folder)
    return removed


def load(dnnl: str) -> ctypes.CDLL | None:
    """oneDNN from ``dnnl`` (a path) on a runtime of its own (see above); None where that cannot be done (the file
    is not an OpenMP build, no libgomp, the cache, the loader), and the caller loads ``dnnl`` as it is."""
    if not os.path.isfile(dnnl):
        return None
    try:
        copies = _copies(dnnl)
        if copies is None:
            return None
        gomp_copy, dnnl_copy = copies
        gomp = ctypes.CDLL(str(gomp_copy), mode=os.RTLD_LOCAL)
        lib = ctypes.CDLL(str(dnnl_copy), mode=os.RTLD_LOCAL | getattr(os, "RTLD_DEEPBIND", 0))
    except OSError:
        return None
    _kept.append(gomp)
    return lib

"""oneDNN on an OpenMP runtime of its own (backends/host/omp_copy.py): the renamed copies of libgomp and libdnnl,
and oneDNN's threads staying its own next to a libgomp another library loaded into the global scope, before or
after devicelayer (as PyTorch's wheels do)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from devicelayer.backends.host import dnnl as host_dnnl, omp_copy

GOMP = omp_copy.runtime_file("/nonexistent")
needs_gomp = pytest.mark.skipif(GOMP is None, reason="no libgomp.so.1 on this machine")
needs_onednn = pytest.mark.skipif(host_dnnl.library() is None, reason="oneDNN is not installed")
needs_two_cpus = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: every team is of one")


def _strings(data: bytes) -> bytes:
    start, size = omp_copy.dynamic_strings(data)
    return data[start:start + size]


@needs_gomp
def test_the_copy_of_libgomp_has_another_soname_and_nothing_else_changes():
    data = open(GOMP, "rb").read()
    new = omp_copy.renamed(data)
    assert new is not None and len(new) == len(data)
    assert b"\0libgomp.so.1\0" in b"\0" + _strings(data) and b"\0libgomp.so.1\0" not in b"\0" + _strings(new)
    assert b"\0libgomp.dl.1\0" in b"\0" + _strings(new)
    start, size = omp_copy.dynamic_strings(data)
    assert new[:start] == data[:start] and new[start + size:] == data[start + size:]
    assert omp_copy.renamed(new) is None  # nothing left to rename


def test_renaming_refuses_what_it_cannot_patch():
    assert omp_copy.renamed(b"not an ELF file at all" * 4) is None
    assert omp_copy.dynamic_strings(b"\x7fELF" + b"\x01" * 60) is None  # a 32-bit file
    assert omp_copy.renamed(open(sys.executable, "rb").read(), b"libnothing.so.9", b"libnothing.dl.9") is None
    with pytest.raises(ValueError, match="one length"):
        omp_copy.renamed(b"", b"libgomp.so.1", b"libgomp.so.12")


# a fresh process: another library's libgomp in the global scope, its team size set to one on the main thread,
# before or after devicelayer loads oneDNN; oneDNN's verbose mode reports the threads of the runtime it calls
_PROBE = """
import ctypes, os, sys
import numpy as np
def shared():
    g = ctypes.CDLL('libgomp.so.1', mode=os.RTLD_GLOBAL)
    g.omp_set_num_threads(1)
if sys.argv[1] == 'before':
    shared()
from devicelayer.backends.host import dnnl, omp
lib = dnnl.library()
if sys.argv[1] == 'after':
    shared()
maps = {line.rsplit('/', 1)[-1].strip() for line in open('/proc/self/maps') if 'libgomp' in line}
print('own copy', 'libgomp.dl.1' in maps, 'shared', any(m.startswith('libgomp.so') for m in maps))
print('threads', omp.describe(lib))
a = np.random.default_rng(0).random((64, 64), dtype=np.float32)
c = np.full((64, 64), np.nan, np.float32)
dnnl.sgemm(False, False, 64, 64, 64, 1.0, a.ctypes.data, 64, a.ctypes.data, 64, 0.0, c.ctypes.data, 64)
print('product', bool(np.allclose(c, a @ a, rtol=1e-4, atol=1e-4)))
"""


def _probe(order: str, **env: str) -> str:
    done = subprocess.run([sys.executable, "-c", _PROBE, order], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ONEDNN_VERBOSE": "1", "DEVICELAYER_PIN_THREADS": "0", **env})
    assert done.returncode == 0, done.stderr
    return done.stdout


@needs_gomp
@needs_onednn
@needs_two_cpus
@pytest.mark.parametrize("order", ["before", "after"])
def test_onednn_keeps_its_own_threads_next_to_another_librarys_libgomp(order):
    n = len(os.sched_getaffinity(0))
    out = _probe(order)
    assert "own copy True shared True" in out
    assert f"threads {n} OpenMP threads, a runtime of their own" in out
    assert f"runtime:OpenMP,nthr:{n}" in out  # oneDNN's calls reach its own runtime, not the one set to 1
    assert "product True" in out


@needs_gomp
@needs_onednn
@needs_two_cpus
def test_turned_off_onednn_shares_the_runtime_loaded_before_it():
    out = _probe("before", DEVICELAYER_PRIVATE_OPENMP="0")
    assert "own copy False shared True" in out
    assert "runtime:OpenMP,nthr:1" in out and "product True" in out


@needs_gomp
def test_an_unwritable_cache_leaves_onednn_as_it_is(tmp_path, monkeypatch, capsys):
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("DEVICELAYER_CACHE", str(tmp_path / "file"))
    dnnl = tmp_path / "libdnnl.so.3"
    dnnl.write_bytes(open(GOMP, "rb").read())  # (any ELF needing or naming libgomp.so.1 would be patched)
    assert omp_copy.load(str(dnnl)) is None
    assert "cannot write the disk cache" in capsys.readouterr().err
    assert omp_copy.load(str(tmp_path / "missing.so")) is None


@pytest.mark.parametrize("value,want", [(None, True), ("1", True), ("0", False), ("off", False), ("no", False)])
def test_wanted_follows_the_environment(monkeypatch, value, want):
    if value is None:
        monkeypatch.delenv("DEVICELAYER_PRIVATE_OPENMP", raising=False)
    else:
        monkeypatch.setenv("DEVICELAYER_PRIVATE_OPENMP", value)
    assert omp_copy.wanted() is want


@needs_gomp
def test_copies_are_made_once_and_stale_ones_go_when_new_ones_are_made(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVICELAYER_CACHE", str(tmp_path / "cache"))
    lib = tmp_path / "lib" / "libdnnl.so.3"
    lib.parent.mkdir()
    lib.write_bytes(open(GOMP, "rb").read())  # (an ELF naming libgomp.so.1 stands in for oneDNN)
    first = omp_copy._copies(str(lib))
    assert first is not None and all(p.is_file() for p in first)
    assert omp_copy.renamed(first[0].read_bytes()) is None  # the copy names libgomp.dl.1 only
    assert omp_copy._copies(str(lib)) == first  # made once
    os.utime(lib, ns=(lib.stat().st_atime_ns, lib.stat().st_mtime_ns + 10**9))  # an upgrade in place
    second = omp_copy._copies(str(lib))
    assert second is not None and second[0].parent != first[0].parent
    assert not first[0].parent.exists() and second[0].is_file()  # the stale pair went
    root = second[0].parent.parent
    (root / "not-a-copy").mkdir()  # a folder without sources.json is left alone
    assert omp_copy.prune(root) == [] and (root / "not-a-copy").is_dir()
    lib.unlink()  # its original gone: the pair goes at the next prune
    assert omp_copy.prune(root) == [second[0].parent] and not second[0].parent.exists()

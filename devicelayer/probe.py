"""Starting a backend in a short-lived child process first, so that a driver that crashes costs its backend, not
the process.

A broken driver can crash in native code while devices are listed: a garbage
``.icd`` file (one holding a NUL byte) crashes the OpenCL ICD loader inside
``clGetPlatformIDs``.  No Python code survives that, so before the registry
starts such a backend here, it starts it in a child process (``main``).  The
verdict is kept on disk (``$DEVICELAYER_CACHE/probes``) under a key made of the
driver files and settings the backend names (``Backend.driver_fingerprint``):
the probe runs again only when one of them changes, and a warm start reads one
small file per backend.  A backend whose probe crashed is reported by
``devicelayer.unavailable()`` with the signal.

``DEVICELAYER_PROBE=0`` starts every backend in this process without a probe.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from .diskcache import cache_dir

log = logging.getLogger("devicelayer")

#: seconds a probe may take before its driver counts as hanging (``DEVICELAYER_PROBE_TIMEOUT``)
PROBE_TIMEOUT = 60.0
#: what the probe prints once the backend listed its devices (a driver may also end the process itself)
_DONE = "devicelayer-probe: listed"
_FORMAT = 1  # of the cache files; part of their key
_OFF = ("0", "off", "no", "false")
_EXTERNAL = {getattr(signal, n) for n in ("SIGKILL", "SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, n)}


# -- what a backend's fingerprint is made of ------------------------------------------------------------------------
def stamp(path: str | os.PathLike) -> str:
    """``path`` with its size and modification time (of what a link points to), or marked missing."""
    try:
        st = os.stat(path)
    except OSError:
        return f"{path} missing"
    return f"{path} {st.st_size} {st.st_mtime_ns}"


def _library_dirs() -> list[str]:
    multiarch = getattr(sys.implementation, "_multiarch", "")
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    for base in ("/usr/local/lib", "/usr/lib", "/lib"):
        if multiarch:
            dirs.append(f"{base}/{multiarch}")
        dirs.append(base)
    return dirs + ["/usr/lib64", "/lib64"]


def library_stamp(name: str, relative_to: str | os.PathLike | None = None) -> str:
    """The stamp of a library a driver manifest names: a path (relative to ``relative_to`` when not absolute),
    or a bare file name looked up where the dynamic loader looks first."""
    if os.sep in name:
        path = Path(name) if relative_to is None else Path(relative_to) / name
        return stamp(path)
    for folder in _library_dirs():
        candidate = os.path.join(folder, name)
        if os.path.exists(candidate):
            return stamp(candidate)
    return f"{name} (by the loader's search)"


def folder_files(folder: str | os.PathLike, suffix: str) -> list[Path]:
    """The files of ``folder`` ending in ``suffix``, sorted (none where it is missing)."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    return [Path(folder) / n for n in names if n.endswith(suffix)]


def environment(names: Iterable[str] = (), prefixes: Iterable[str] = ()) -> list[str]:
    """``NAME=value`` of the environment variables named, and of those starting with one of ``prefixes``."""
    wanted = set(names)
    starts = tuple(prefixes)
    return [f"{k}={v}" for k, v in sorted(os.environ.items()) if k in wanted or (starts and k.startswith(starts))]


# -- probing ----------------------------------------------------------------------------------------------------------
def enabled() -> bool:
    """False where ``DEVICELAYER_PROBE=0`` (or where no Python executable is known to start a probe with)."""
    return os.environ.get("DEVICELAYER_PROBE", "").strip().lower() not in _OFF and bool(sys.executable)


def _cache_file(name: str, target: str, fingerprint: Sequence[str]) -> Path:
    key = json.dumps([_FORMAT, name, target, sys.executable, sys.version, list(fingerprint)])
    return cache_dir() / "probes" / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:40]}.json"


def _read(path: Path) -> str | None:
    """The cached verdict ("" for a driver that survived), None where there is none (or it is unreadable)."""
    try:
        data = json.loads(path.read_text())
        verdict = data["verdict"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return verdict if isinstance(verdict, str) else None


def _write(path: Path, verdict: str, fingerprint: Sequence[str]) -> bool:
    """Keep ``verdict`` (with the fingerprint it was made for); False where the cache folder cannot be written,
    which costs a probe next time, nothing else."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump({"verdict": verdict, "written": time.time(), "fingerprint": list(fingerprint)}, fh,
                          indent=1)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as exc:
        log.debug("devicelayer: cannot keep the probe verdict in %s: %s", path, exc)
        return False
    return True


def _timeout() -> float:
    try:
        return max(1.0, float(os.environ.get("DEVICELAYER_PROBE_TIMEOUT", PROBE_TIMEOUT)))
    except ValueError:
        return PROBE_TIMEOUT


def _start(target: str) -> subprocess.Popen:
    # the child imports what this process imports (this devicelayer, these driver bindings), in the same order
    env = dict(os.environ, DEVICELAYER_PROBE="0", PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.Popen([sys.executable, "-c", "import sys; from devicelayer.probe import main; main(sys.argv[1])",
                             target], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, errors="replace")


def _verdict(proc: subprocess.Popen, deadline: float) -> tuple[str, bool]:
    """The probe's verdict ("" when the backend listed its devices) and whether to keep it."""
    try:
        out, err = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return (f"starting it did not finish within {_timeout():.0f} s in a probe process (the driver hangs; "
                f"DEVICELAYER_PROBE_TIMEOUT sets the limit)"), False
    code = proc.returncode
    if code == 0 and _DONE in out:
        return "", True
    last = next((ln.strip() for ln in reversed(err.splitlines()) if ln.strip()), "")
    detail = f" ({last[:300]})" if last else ""
    if code < 0:
        try:
            sig = signal.Signals(-code)
            what = f"{sig.name}, {signal.strsignal(sig) or sig.name}"
        except ValueError:
            sig, what = None, f"signal {-code}"
        # a signal sent from outside (the OOM killer's, a user's) says nothing lasting about the driver
        return f"its driver crashed a probe process ({what}) while it listed devices{detail}", sig not in _EXTERNAL
    return f"its driver ended a probe process with exit status {code} while it listed devices{detail}", True


def verdicts(requests: Mapping[str, tuple[str, Sequence[str]]]) -> dict[str, str]:
    """Why each backend must not start here: name -> reason, for those whose driver crashed its probe.

    ``requests``: name -> ("module:Class", fingerprint).  Cached verdicts are read; the others are probed at once,
    in parallel.
    """
    if not requests or not enabled():
        return {}
    found: dict[str, str] = {}
    running: list[tuple[str, Path, subprocess.Popen]] = []
    for name, (target, fingerprint) in requests.items():
        path = _cache_file(name, target, fingerprint)
        verdict = _read(path)
        if verdict is None:
            try:
                running.append((name, path, _start(target)))
            except OSError as exc:  # no process can be started here: start the backend without a probe
                log.warning("devicelayer: cannot probe %s in a child process (%s)", name, exc)
        elif verdict:
            found[name] = f"{verdict}; it is not started in this process (verdict kept in {path} until the driver " \
                          f"files or settings listed there change)"
    deadline = time.monotonic() + _timeout()
    for name, path, proc in running:
        verdict, keep = _verdict(proc, deadline)
        kept = keep and _write(path, verdict, requests[name][1])
        if verdict:
            found[name] = f"{verdict}; it is not started in this process" + (
                f" (verdict kept in {path} until the driver files or settings listed there change)" if kept else "")
    return found


def main(target: str) -> None:
    """In the probe process: start the backend and list its devices; a Python error is the parent's to report."""
    from .registry import _instantiate

    try:
        list(_instantiate(target).devices())
    except BaseException as exc:  # noqa: BLE001 - not a crash: the parent meets the same error and reports it
        print(f"devicelayer-probe: {type(exc).__name__}: {exc}", file=sys.stderr)
    print(_DONE, flush=True)
    sys.stderr.flush()
    os._exit(0)  # a dedicated process: what the driver does at exit is not what was asked


"""Backend discovery: entry points, DEVICELAYER_BACKENDS, unavailable backends, and a plugin backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import devicelayer as dl

ROOT = Path(__file__).resolve().parent.parent


def run_python(code: str, env: dict | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=300)


def test_every_device_has_a_unique_stable_id():
    ids = [d.id for d in dl.devices()]
    assert len(ids) == len(set(ids)) and ids
    again = run_python("import devicelayer as dl, json; print(json.dumps([d.id for d in dl.devices()]))")
    assert json.loads(again.stdout.strip().splitlines()[-1]) == ids


def test_backends_restricted_and_ordered_by_environment():
    present = list(dict.fromkeys(d.info.backend for d in dl.devices()))
    order = list(reversed(present))
    out = run_python("import devicelayer as dl; print(','.join(dict.fromkeys(d.info.backend for d in dl.devices())))",
                     {"DEVICELAYER_BACKENDS": ",".join(order)})
    assert out.stdout.strip().splitlines()[-1] == ",".join(order)
    only = run_python("import devicelayer as dl; print([d.id for d in dl.devices()])",
                      {"DEVICELAYER_BACKENDS": present[-1]})
    assert all(present[-1] in i for i in eval(only.stdout.strip().splitlines()[-1]))


def test_environment_naming_no_installed_backend_is_an_invalid_argument_listing_them():
    """A DEVICELAYER_BACKENDS with an unknown name, or no name at all, is refused by every call that loads the
    backends (it used to give no devices, silently); a backend that is installed but cannot start is reported."""
    out = run_python("""
        import os, devicelayer as dl
        for value in ["warpdrive", "host,warpdrive", ",,,", " , "]:
            os.environ["DEVICELAYER_BACKENDS"] = value
            dl.reset()
            for call in (dl.devices, lambda: dl.device("host"), dl.unavailable):
                try:
                    print("accepted", value, call())
                except dl.InvalidArgument as exc:
                    print("refused", value, "|", exc)
        os.environ["DEVICELAYER_BACKENDS"] = "host"
        dl.reset()
        print("fixed", [d.id for d in dl.devices()])
        """)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    refused = [line for line in lines if line.startswith("refused")]
    assert len(refused) == 12, out.stdout
    installed = ", ".join(sorted(dl.registry._registry._candidates()))
    for line in refused:
        assert installed in line, line
        assert ("no backend named 'warpdrive'" in line) == ("warpdrive" in line.split("|")[0]), line
        assert "warpdrive" in line.split("|")[0] or "names no backend" in line, line
    assert lines[-1] == "fixed ['host']"  # the registry is not left broken


def test_asking_for_one_device_starts_only_its_backend_and_the_rest_join_later():
    """``device(id)`` starts that device's backend alone (a fresh process's first result does not wait for every
    driver); ``devices()`` later starts the others and keeps the same device objects."""
    out = run_python("""
        import json, devicelayer as dl
        from devicelayer.registry import _registry
        host = dl.device("host")
        started_first = sorted(_registry._single)
        everything = dl.devices()
        print(json.dumps({"first": started_first, "same": any(d is host for d in everything),
                          "ids": [d.id for d in everything], "again": dl.device("host") is host}))
        """)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["first"] == ["host"]
    assert got["same"] and got["again"]
    assert got["ids"] == [d.id for d in dl.devices()]


def test_a_device_of_an_unavailable_or_unnamed_backend_is_refused_when_asked_for_alone():
    out = run_python("""
        import devicelayer as dl
        for wanted in ("opencl:0", "warpdrive:0", "host:7"):
            try:
                dl.device(wanted)
                print("accepted", wanted)
            except (dl.BackendUnavailable, dl.DeviceNotFound) as exc:
                print("refused", wanted, type(exc).__name__, "|", exc)
        """, {"DEVICELAYER_BACKENDS": "host"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("refused opencl:0 DeviceNotFound") and "available: host" in lines[0], lines
    assert lines[1].startswith("refused warpdrive:0 DeviceNotFound"), lines
    assert lines[2].startswith("refused host:7 DeviceNotFound") and "host has host" in lines[2], lines


def test_unavailable_backend_has_reason_and_device_call_says_it():
    reasons = {u.backend: u.reason for u in dl.unavailable()}
    for name, reason in reasons.items():
        assert reason and len(reason) > 10
    if reasons:
        name = next(iter(reasons))
        with pytest.raises((dl.BackendUnavailable, dl.DeviceNotFound)):
            dl.device(f"{name}:0")


def test_a_failing_plugin_leaves_the_others_working(tmp_path):
    (tmp_path / "brokenplugin.py").write_text("raise RuntimeError('driver exploded at start')\n")
    dist = tmp_path / "brokenplugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: brokenplugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[devicelayer.backends]\nbroken = brokenplugin:Backend\n")
    out = run_python("""
        import devicelayer as dl
        print([d.id for d in dl.devices()])
        print([u.reason for u in dl.unavailable() if u.backend == 'broken'])
        """, {"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    assert out.returncode == 0, out.stderr
    assert "host" in out.stdout and "driver exploded at start" in out.stdout


def test_plugin_backend_from_entry_point_passes_the_conformance_suite(tmp_path):
    """A separate package adds a backend through the entry-point group; the suite runs on it unchanged."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "tinydev.py").write_text((Path(__file__).parent / "plugin" / "tinydev.py").read_text())
    dist = site / "tinydev-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tinydev\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[devicelayer.backends]\ntiny = tinydev:TinyBackend\n")
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "DEVICELAYER_BACKENDS": "tiny,host", "DEVICELAYER_REQUIRE": "tiny"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "tiny",
                           str(ROOT / "tests" / "test_conformance.py"), str(ROOT / "tests" / "test_misuse.py")],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    tail = proc.stdout[-3000:]
    assert proc.returncode == 0, tail + proc.stderr[-2000:]
    summary = tail.strip().splitlines()[-1]  # (the lines above may quote reasons that say "failed")
    assert " passed" in summary and " failed" not in summary, tail

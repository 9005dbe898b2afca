"""``devicelayer info``: the table and the documented JSON schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import devicelayer as dl
from devicelayer.cli import INFO_SCHEMA, main

DEVICE_KEYS = {"id", "backend", "name", "vendor", "driver_version", "memory_total", "memory_free", "compute_units",
               "max_work_group_size", "subgroup_size", "local_memory", "dtypes", "unified_memory"}


def test_info_json_schema(capsys):
    assert main(["info", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == INFO_SCHEMA
    assert [d["id"] for d in doc["devices"]] == [d.id for d in dl.devices()]
    for d in doc["devices"]:
        assert DEVICE_KEYS <= set(d)
        assert isinstance(d["memory_total"], int) and d["memory_total"] > 0
        assert isinstance(d["dtypes"], list) and "float32" in d["dtypes"]
        assert isinstance(d["unified_memory"], bool)
    for u in doc["unavailable"]:
        assert set(u) == {"backend", "reason"} and u["reason"]


def test_info_table_names_every_device_and_missing_backend():
    out = subprocess.run([sys.executable, "-m", "devicelayer.cli", "info"], capture_output=True, text=True,
                         timeout=120, env={"COLUMNS": "200", "PATH": "", **__import__("os").environ})
    assert out.returncode == 0, out.stderr
    for d in dl.devices():
        assert d.id in out.stdout
    for u in dl.unavailable():
        assert u.backend in out.stdout


def test_info_backend_filter_and_bad_arguments(capsys):
    assert main(["info", "--json", "--backend", "host"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["backend"] for d in doc["devices"]] == ["host"]
    assert main(["info", "--backend", "warpdrive"]) == 2
    assert "unknown backend" in capsys.readouterr().err


def test_bench_measures_caches_and_info_shows_it(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("DEVICELAYER_CACHE", str(tmp_path))
    dev = dl.devices()[-1].id
    assert main(["info", "--json", "--measured", "--backend", dl.device(dev).info.backend]) == 0
    before = json.loads(capsys.readouterr().out)
    assert all(d["measured"] is None for d in before["devices"])
    assert main(["bench", "--quick", "--device", dev, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (fig,) = doc["devices"]
    assert fig["id"] == dev
    for key in ("launch_wait_us", "upload_GBps", "download_GBps", "copy_GBps", "gemm_f32_TFLOPs"):
        assert fig[key] > 0, key
    assert (tmp_path / "measured.json").is_file()
    assert main(["info", "--json", "--measured"]) == 0
    after = {d["id"]: d for d in json.loads(capsys.readouterr().out)["devices"]}
    assert after[dev]["measured"]["upload_GBps"] == fig["upload_GBps"]
    assert main(["bench", "--device", "nope:0"]) == 2


def test_an_interrupted_command_exits_130(capsys, monkeypatch):
    from devicelayer import cli_run

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_run, "main", interrupted)
    assert main(["run", "--bundled", "tiny_cnn"]) == 130
    assert "interrupted" in capsys.readouterr().err


COMMANDS = {
    "info": ["info"],
    "info --json": ["info", "--json"],
    "bench": ["bench", "--quick", "--device", "host"],
    "run": ["run", "--bundled", "tiny_cnn", "--device", "host"],
    "generate": ["generate", "--bundled", "tiny_gpt", "--prompt", "1,2", "--tokens", "1", "--device", "host"],
}


@pytest.mark.parametrize("value, says", [("warpdrive", "no backend named 'warpdrive' is installed"),
                                         ("host,warpdrive", "no backend named 'warpdrive' is installed"),
                                         (",,,", "names no backend")])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_backends_environment_naming_no_installed_backend_is_a_usage_error(capsys, monkeypatch, command, value,
                                                                           says):
    """Every command refuses it before doing anything, naming the value and listing the installed backends."""
    monkeypatch.setenv("DEVICELAYER_BACKENDS", value)
    assert main(COMMANDS[command]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith(f"devicelayer {COMMANDS[command][0]}: DEVICELAYER_BACKENDS={value!r}")
    assert says in line and "host" in line.split(says)[-1] and "Traceback" not in err


@pytest.mark.parametrize("cache", ["a file", "in /proc"])
def test_an_unwritable_cache_is_warned_of_once_and_every_command_goes_on(capsys, monkeypatch, tmp_path, cache):
    if cache == "a file":
        folder = tmp_path / "cache"
        folder.write_text("not a folder")
    else:
        folder = Path("/proc") / "devicelayer-cache"  # nobody, root included, can create it
    monkeypatch.setenv("DEVICELAYER_CACHE", str(folder))
    assert main(["bench", "--quick", "--device", "host", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["devices"][0]["upload_GBps"] > 0
    warnings = [line for line in err.splitlines() if "cannot write the disk cache" in line]
    assert len(warnings) == 1 and str(folder) in warnings[0] and "Traceback" not in err
    assert main(["bench", "--quick", "--device", "host", "--json"]) == 0  # warned once per process
    assert "cannot write the disk cache" not in capsys.readouterr().err
    assert main(["info", "--json", "--measured", "--backend", "host"]) == 0
    assert json.loads(capsys.readouterr().out)["devices"][0]["measured"] is None
    assert main(["run", "--bundled", "tiny_cnn", "--device", "host", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True


def test_cache_writes_are_whole_or_not_at_all(tmp_path, capsys, monkeypatch):
    from devicelayer import diskcache

    monkeypatch.setenv("DEVICELAYER_CACHE", str(tmp_path / "ok"))
    assert diskcache.write(diskcache.cache_dir() / "sub" / "f.bin", b"data")
    assert (tmp_path / "ok" / "sub" / "f.bin").read_bytes() == b"data"
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("DEVICELAYER_CACHE", str(tmp_path / "file"))
    assert not diskcache.write(diskcache.cache_dir() / "f.bin", b"data")
    assert not diskcache.write(diskcache.cache_dir() / "g.bin", b"data")
    assert capsys.readouterr().err.count("is a file, not a folder") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "ok"]
    assert sorted(p.name for p in (tmp_path / "ok" / "sub").iterdir()) == ["f.bin"]  # no temporary file left

"""``devicelayer info``: the table and the documented JSON schema."""

from __future__ import annotations

import json
import subprocess
import sys

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

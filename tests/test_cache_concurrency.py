"""Two processes compiling the same kernels into one fresh cache folder at once, round after round: both right,
every cache file whole and valid afterwards, and a third process served by the cache alone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import devicelayer as dl
from devicelayer import measure

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from cache_worker import STORES  # noqa: E402
ROUNDS = 3


def run_workers(cache: Path, round_: int, count: int, *extra: str) -> list[dict]:
    """``count`` workers (tests/cache_worker.py) started together on ``cache``; their JSON results."""
    env = {**os.environ, "DEVICELAYER_CACHE": str(cache),
           "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, str(HERE / "cache_worker.py"), str(round_), str(w), str(count),
                               *extra],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=HERE.parent)
             for w in range(count)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def spirv_files_valid(cache: Path) -> list[str]:
    from devicelayer.backends.vulkan import spirv as vulkan_spirv

    return [p.name for p in (cache / "spirv").glob("*") if vulkan_spirv._cache_read(p, p.stem) is None]


def pipeline_files_valid(cache: Path) -> list[str]:
    from devicelayer.backends.vulkan.backend import pipeline_cache_body

    return [p.name for p in (cache / "vulkan").glob("*") if not pipeline_cache_body(p.read_bytes())]


@pytest.mark.timeout(900)
def test_two_processes_share_one_cache_folder(tmp_path):
    cache = tmp_path / "cache"
    vulkan = any(d.info.backend == "vulkan" for d in dl.devices())
    for r in range(ROUNDS):
        for result in run_workers(cache, r, 2):
            assert result["wrong"] == [], result
            assert all(n > 0 for n in result["checked"].values()), result
    shutil.rmtree(cache / "barriers")
    leftovers = sorted(p.name for p in cache.rglob("*") if p.name.endswith(".tmp"))
    assert leftovers == [], "temporary files left behind"
    if vulkan:
        assert list((cache / "spirv").glob("*.spv")) and spirv_files_valid(cache) == []
        assert list((cache / "vulkan").glob("pipelines-*.bin")) and pipeline_files_valid(cache) == []
    figures = json.loads((cache / "measured.json").read_text())  # one JSON document, not two writes mixed
    keys = {k for k, v in figures.items() if isinstance(v, dict) and v.get("launch_wait_us", 0) > 0}
    want = {f"{d.id}|{d.info.name}|{d.info.driver_version}|{measure.MEASURE_SCHEMA}+worker{w}{i}"
            for d in dl.devices() for w in range(2) for i in ["", *(f".{i}" for i in range(STORES))]}
    assert want <= keys, f"figures lost: {sorted(want - keys)}"
    (third,) = run_workers(cache, ROUNDS - 1, 1, "--offline")  # every kernel from the cache, none compiled
    assert third["wrong"] == [], third

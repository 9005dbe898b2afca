"""Tuned choices kept in the disk cache (``devicelayer.tuning``): kept across processes, merged, and never fatal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devicelayer.tuning import TunedChoices

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVICELAYER_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_choice_is_read_back_by_a_fresh_store(cache):
    TunedChoices("conv", "gpu A|driver 1").put("k1", {"how": "dnn", "algo": 6})
    again = TunedChoices("conv", "gpu A|driver 1")
    assert again.get("k1") == {"how": "dnn", "algo": 6}
    assert again.get("k2") is None
    assert again.path().parent == cache / "tuned"


def test_another_driver_or_kind_does_not_see_the_choice(cache):
    TunedChoices("conv", "gpu A|driver 1").put("k1", 1)
    assert TunedChoices("conv", "gpu A|driver 2").get("k1") is None
    assert TunedChoices("gemm", "gpu A|driver 1").get("k1") is None


def test_choices_stored_by_another_process_meanwhile_are_kept(cache):
    mine = TunedChoices("conv", "gpu A")
    assert mine.get("mine") is None  # read (empty) before the other process writes
    code = "from devicelayer.tuning import TunedChoices; TunedChoices('conv', 'gpu A').put('theirs', 2)"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=dict(os.environ), timeout=120)
    mine.put("mine", 1)
    fresh = TunedChoices("conv", "gpu A")
    assert (fresh.get("mine"), fresh.get("theirs")) == (1, 2)
    assert len(fresh) == 2


@pytest.mark.parametrize("content", [b"", b"{not json", b"\xff\xfe", b"[1, 2]", b'{"identity": "other"}',
                                     b'{"identity": null, "entries": 5}'])
def test_a_corrupt_or_foreign_file_counts_as_empty_and_is_replaced(cache, content):
    store = TunedChoices("conv", "gpu A")
    store.path().parent.mkdir(parents=True)
    store.path().write_bytes(content)
    assert store.get("k") is None
    store.put("k", 3)
    assert TunedChoices("conv", "gpu A").get("k") == 3
    assert json.loads(store.path().read_text())["entries"] == {"k": 3}


def test_an_unwritable_cache_keeps_the_choice_in_the_process_and_warns_once(tmp_path, monkeypatch, capfd):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("DEVICELAYER_CACHE", str(blocker / "cache"))
    store = TunedChoices("conv", "gpu B")
    store.put("k", 1)
    store.put("k2", 2)
    assert (store.get("k"), store.get("k2")) == (1, 2)
    err = capfd.readouterr().err
    assert err.count("cannot write the disk cache") == 1 and "is a file, not a folder" in err


def test_a_changed_cache_folder_is_read_anew(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVICELAYER_CACHE", str(tmp_path / "one"))
    store = TunedChoices("conv", "gpu A")
    store.put("k", 1)
    monkeypatch.setenv("DEVICELAYER_CACHE", str(tmp_path / "two"))
    assert store.get("k") is None
    monkeypatch.setenv("DEVICELAYER_CACHE", str(tmp_path / "one"))
    assert store.get("k") == 1

"""Entry points of one group read from the metadata folders directly: the same list, in the same order, as
importlib.metadata gives, shadowed distributions included; importlib.metadata's own answer where sys.path
holds an archive."""

from __future__ import annotations

import importlib.metadata
import sys
import zipfile

import pytest

from devicelayer import entry_points


def _importlib(group: str) -> list[tuple[str, str]]:
    return [(ep.name, ep.value) for ep in importlib.metadata.entry_points(group=group)]


def _dist(folder, name: str, version: str, text: str | None, suffix: str = ".dist-info") -> None:
    meta = folder / f"{name}-{version}{suffix}"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if text is not None:
        (meta / "entry_points.txt").write_text(text)


@pytest.mark.parametrize("group", ["devicelayer.backends", "console_scripts", "pytest11", "no.such.group"])
def test_the_installed_groups_read_as_importlib_metadata_reads_them(group):
    assert entry_points.group(group) == _importlib(group)


def test_the_first_distribution_of_a_name_on_the_path_wins(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    _dist(first, "Tiny_Plugin", "1.0", "[devicelayer.backends]\ntiny = tinyone:Backend\n")
    _dist(second, "tiny.plugin", "2.0", "[devicelayer.backends]\ntiny = tinytwo:Backend\nother = two:B\n")
    _dist(second, "shadowing", "1.0", None)  # no entry points: still a distribution
    _dist(second, "legacy", "0.1", "# a comment\n[devicelayer.backends]\n  old = legacy.mod:Old [extra]\n",
          ".egg-info")
    _dist(second, "elsewhere", "1.0", "[console_scripts]\nx = y:z\n")
    monkeypatch.setattr(sys, "path", [str(first), str(second), str(tmp_path / "missing")])
    got = entry_points.group("devicelayer.backends")
    assert got == _importlib("devicelayer.backends")
    assert ("tiny", "tinyone:Backend") in got and ("tiny", "tinytwo:Backend") not in got
    assert ("old", "legacy.mod:Old [extra]") in got and ("other", "two:B") not in got


def test_an_archive_on_the_path_is_left_to_importlib_metadata(tmp_path, monkeypatch):
    archive = tmp_path / "plugins.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zipped-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: zipped\nVersion: 1.0\n")
        z.writestr("zipped-1.0.dist-info/entry_points.txt", "[devicelayer.backends]\nzipped = zipped:Backend\n")
    monkeypatch.setattr(sys, "path", [str(archive)])
    assert entry_points._scanned("devicelayer.backends") is None
    got = entry_points.group("devicelayer.backends")
    assert got == _importlib("devicelayer.backends") and ("zipped", "zipped:Backend") in got

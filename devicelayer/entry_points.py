"""The entry points of one group, read from the metadata folders of the installed distributions.

``importlib.metadata.entry_points`` makes a ``Distribution`` of every installed
package and parses every ``entry_points.txt`` to answer for one group: tens of
milliseconds in an environment of a few hundred packages, paid by every process
that starts a device.  This reads the folders on ``sys.path`` directly and parses
(with importlib.metadata's own parser) only the files that name the group, giving
the same answer: distributions in ``sys.path`` order, the first of a name winning.
Where the metadata could live elsewhere (a zip archive on ``sys.path``, a finder
other than the standard one that lists distributions), importlib.metadata answers.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import os
import re
import sys
from pathlib import Path

_SUFFIXES = (".dist-info", ".egg-info")


def group(name: str) -> list[tuple[str, str]]:
    """(name, value) of every entry point in group ``name``, as ``importlib.metadata.entry_points(group=name)``
    lists them."""
    found = _scanned(name)
    if found is None:
        return [(ep.name, ep.value) for ep in importlib.metadata.entry_points(group=name)]
    return found


def _scanned(group_name: str) -> list[tuple[str, str]] | None:
    """The group's entry points from the folders on sys.path; None where something else could list
    distributions."""
    if any(hasattr(f, "find_distributions") and f is not importlib.machinery.PathFinder for f in sys.meta_path):
        return None
    marker = f"[{group_name}]".encode()
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    for entry in sys.path:
        folder = entry or "."
        if not os.path.isdir(folder):
            if os.path.exists(folder):  # a zip archive or another file: its finder may hold distributions
                return None
            continue
        try:
            names = os.listdir(folder)  # (the order importlib.metadata meets them in)
        except OSError:
            continue
        for item in names:
            if not item.endswith(_SUFFIXES):
                continue
            dist = _normalized(item)
            if dist in seen:
                continue
            seen.add(dist)
            meta = Path(folder, item)
            try:
                text = (meta / "entry_points.txt").read_bytes()
            except OSError:
                continue
            if marker not in text:
                continue
            for ep in importlib.metadata.PathDistribution(meta).entry_points.select(group=group_name):
                out.append((ep.name, ep.value))
    return out


def _normalized(folder_name: str) -> str:
    """The distribution name of a metadata folder, normalised as importlib.metadata compares them."""
    stem = folder_name.rsplit(".", 1)[0]
    return re.sub(r"[-_.]+", "_", stem.partition("-")[0]).lower()

"""The misuse catalogue on every device: each misuse raises the exact exception with its message, and the
device and the process work normally afterwards (no leaked buffers, a round trip, a launch and, after graph,
ONNX and command misuse, a small graph run).  docs/misuse.md lists the same cases."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from misuse_cases import AREAS, CATALOGUE, GRAPH_AREAS, Scratch, assert_no_leak, graph_works, live_buffers, \
    still_works

DOC = Path(__file__).resolve().parent.parent / "docs" / "misuse.md"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", CATALOGUE, ids=[c.id for c in CATALOGUE])
def test_misuse(case, device, request, tmp_path):
    reason = case.xfail(device) if case.xfail else None
    if reason:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    before = live_buffers()
    scratch = Scratch(device, tmp_path)
    try:
        call = case.setup(scratch)
        with pytest.raises(case.error) as info:
            call()
    finally:
        scratch.close()
    assert type(info.value) is case.error, f"raised {type(info.value).__name__}, not {case.error.__name__}"
    assert case.fragment in str(info.value), f"{case.fragment!r} is not in the message: {info.value}"
    if case.verify:
        case.verify(info.value)
    assert_no_leak(before)
    still_works(device)
    if case.area in GRAPH_AREAS:
        graph_works(device)


def test_catalogue_covers_every_area():
    counts = {area: sum(c.area == area for c in CATALOGUE) for area in AREAS}
    assert all(counts.values()), counts
    assert len(CATALOGUE) >= 40


def test_docs_table_lists_exactly_the_catalogue():
    rows = list(re.finditer(r"^\| `([^`]+)` \|.*$", DOC.read_text(), re.MULTILINE))
    documented = {m.group(1): m.group(0) for m in rows}
    assert len(documented) == len(rows), "docs/misuse.md lists an id twice"
    expected = {c.id: c.row() for c in CATALOGUE}
    only_doc = sorted(set(documented) - set(expected))
    only_tests = sorted(set(expected) - set(documented))
    assert not only_doc, f"docs/misuse.md lists cases no test has: {only_doc}"
    assert not only_tests, "docs/misuse.md lacks these rows:\n" + "\n".join(expected[i] for i in only_tests)
    stale = [expected[i] for i in expected if documented[i] != expected[i]]
    assert not stale, "docs/misuse.md has these rows otherwise (misuse_cases.table() prints them all):\n" \
        + "\n".join(stale)

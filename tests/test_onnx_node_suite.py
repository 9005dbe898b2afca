"""ONNX's node conformance suite (the 1,884 one-op cases ``onnx.backend.test`` generates, with reference inputs and
outputs) on every device present, each compared as ONNX's own runner compares.

Every case that does not pass is in ``node_suite_expected.EXPECTED`` with its reason and kind (op not
supported, semantics refused on purpose, a limit of the test harness), or fails for a dtype the device lacks
(``DeviceInfo.dtypes``, derived below); those are strict expected failures, so a fix shows up as XPASS.  An
expected failure must still fail with a devicelayer error or a wrong answer: any other exception fails the test.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.errors import DeviceLayerError

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from devicelayer.onnx.conformance import check_case, node_cases  # noqa: E402
from node_suite_expected import EXPECTED  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    CASES = {c.name: c for c in node_cases()}


def _dtypes(case) -> set[str]:
    """Element dtypes of the case's inputs and outputs (sequences and optionals by their elements)."""
    out = set()
    for inputs, refs in case.data_sets:
        for x in [*inputs, *refs]:
            for e in (x if isinstance(x, list) else [x]):
                if e is not None and hasattr(e, "dtype"):
                    out.add(np.dtype(e.dtype).name)
    return out


def _expectation(name: str, dev) -> tuple[str, str] | None:
    """(kind, reason) when the case is expected to fail on ``dev``."""
    for e in EXPECTED:
        if re.search(e.pattern, name) and (e.devices is None or dev.info.backend in e.devices):
            return e.kind, e.reason
    if dev.info.kernel_language != "python":
        lacking = sorted(d for d in _dtypes(CASES[name]) if d not in dev.info.dtypes)
        if lacking:
            return "dtype", f"{dev.id} has no {', '.join(lacking)}"
    return None


def _params():
    out = []
    for dev in dl.devices():
        for name in CASES:
            hit = _expectation(name, dev)
            marks = [pytest.mark.xfail(reason=f"{hit[0]}: {hit[1]}", strict=True,
                                       raises=(DeviceLayerError, AssertionError))] if hit else []
            out.append(pytest.param(dev.id, name, marks=marks, id=f"{dev.id}-{name}"))
    return out


@pytest.mark.parametrize("device_id,name", _params())
def test_node_case(device_id, name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_case(CASES[name], device_id)


def test_every_expected_failure_names_a_case_and_a_kind():
    kinds = {"op", "semantics", "harness", "dtype"}
    for e in EXPECTED:
        assert e.kind in kinds, e
        assert e.reason.strip(), e
        assert any(re.search(e.pattern, n) for n in CASES), f"{e.pattern!r} matches no case of the suite"

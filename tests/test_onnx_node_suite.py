"""ONNX's node conformance suite (the 1,884 one-op cases ``onnx.backend.test`` generates, with reference inputs and
outputs) on every device present, each compared as ONNX's own runner compares.

Every case that does not pass is in ``node_suite_expected.EXPECTED`` with its reason and kind (op not
supported, semantics refused on purpose, a limit of the test harness): strict expected failures, so a fix fails
the run as XPASS until the entry goes.  A case may also fail for a dtype the device lacks (``DeviceInfo.dtypes``,
derived below from the case's inputs and outputs): expected too, not strict (reported as XPASS where the data
never reaches the device).  An
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
    from onnx.backend.test.runner import _normalize_tensor

    out = set()
    for inputs, refs in case.data_sets:
        for x in [*inputs, *refs]:
            x = _normalize_tensor(x)
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
    from conftest import _device_ids

    out = []
    for dev in (dl.device(i) for i in _device_ids()):
        for name in CASES:
            hit = _expectation(name, dev)
            # a harness case fails inside ONNX's runner; any other must fail with a devicelayer error or an answer.
            # The listed cases are strict; a dtype the device lacks is not (a case whose data is computed on the host,
            # a NonZero or a folded Range, passes without the device ever holding that dtype: XPASS, reported)
            raises = None if hit and hit[0] == "harness" else (DeviceLayerError, AssertionError)
            strict = bool(hit) and hit[0] not in ("dtype", "random")  # (random draws may match by chance)
            marks = [pytest.mark.xfail(reason=f"{hit[0]}: {hit[1]}", strict=strict, raises=raises)] if hit else []
            out.append(pytest.param(dev.id, name, marks=marks, id=f"{dev.id}-{name}"))
    return out


@pytest.mark.parametrize("device_id,name", _params())
def test_node_case(device_id, name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_case(CASES[name], device_id)


def test_every_expected_failure_names_a_case_and_a_kind():
    kinds = {"op", "semantics", "harness", "dtype", "random"}
    for e in EXPECTED:
        assert e.kind in kinds, e
        assert e.reason.strip(), e
        assert any(re.search(e.pattern, n) for n in CASES), f"{e.pattern!r} matches no case of the suite"

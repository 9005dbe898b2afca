"""ONNX's node conformance suite (the one-op cases ``onnx.backend.test`` generates, with reference inputs and
outputs) run through ``devicelayer.onnx.backend`` on a device, each case classified.

``node_cases()`` loads the cases once per process (about 10 s: onnx builds them in memory); ``run_case``
prepares and runs one on a device and compares with the reference as ONNX's own runner does
(``Runner.assert_similar_outputs``: shapes, dtypes, ``assert_allclose`` with the case's tolerances).
"""

from __future__ import annotations

import re
import time
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

from ..errors import DeviceLayerError, UnsupportedOp

#: outcomes of one case
PASS, UNSUPPORTED, WRONG, ERROR, CRASH = "pass", "unsupported", "wrong", "error", "crash"

_cases: list[Any] | None = None


def node_cases(pattern: str | None = None) -> list[Any]:
    """ONNX's generated node test cases (``onnx.backend.test.case.TestCase``), those whose name matches the
    regular expression ``pattern`` when given."""
    global _cases
    if _cases is None:
        from onnx.backend.test.loader import load_model_tests

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _cases = sorted(load_model_tests(kind="node"), key=lambda c: c.name)
    if pattern is None:
        return list(_cases)
    rx = re.compile(pattern)
    return [c for c in _cases if rx.search(c.name)]


@dataclass
class Outcome:
    """What one case did on one device."""

    name: str
    device: str
    status: str  # PASS, UNSUPPORTED, WRONG, ERROR (another DeviceLayerError), CRASH (any other exception)
    detail: str = ""
    seconds: float = 0.0
    exception: BaseException | None = None


def _normalize(x: Any) -> Any:
    from onnx.backend.test.runner import _normalize_tensor

    return _normalize_tensor(x)


def check_case(case: Any, device_id: str) -> None:
    """Run ``case`` on ``device_id``; raises what the run raised, or AssertionError where an output differs."""
    from onnx.backend.test.runner import Runner

    from .backend import backend_for

    rep = backend_for(device_id).prepare(case.model, "CPU")
    for inputs, refs in case.data_sets:
        outs = rep.run([_normalize(x) for x in inputs])
        Runner.assert_similar_outputs([_normalize(x) for x in refs], outs, case.rtol, case.atol)


def run_case(case: Any, device_id: str) -> Outcome:
    """``check_case`` with its outcome classified instead of raised."""
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check_case(case, device_id)
        status, detail, exc = PASS, "", None
    except UnsupportedOp as e:
        status, detail, exc = UNSUPPORTED, str(e), e
    except AssertionError as e:
        status, detail, exc = WRONG, str(e).strip(), e
    except DeviceLayerError as e:
        status, detail, exc = ERROR, f"{type(e).__name__}: {e}", e
    except Exception as e:  # noqa: BLE001 - classified, not hidden: CRASH is a failure of its own
        status, detail, exc = CRASH, f"{type(e).__name__}: {e}", e
    return Outcome(case.name, device_id, status, detail[:2000], time.perf_counter() - t0, exc)


def run_suite(device_id: str, cases: Sequence[Any] | None = None, progress: Any = None) -> list[Outcome]:
    """Every case (or ``cases``) on ``device_id``; ``progress(outcome)`` is called after each."""
    out = []
    for case in node_cases() if cases is None else cases:
        o = run_case(case, device_id)
        out.append(o)
        if progress is not None:
            progress(o)
    return out

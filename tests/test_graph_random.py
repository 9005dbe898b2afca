"""Random graphs (devicelayer.graph.fuzz) under random placements agree with their float64 NumPy interpretation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import devicelayer as dl
from devicelayer.graph.fuzz import Call, Source, Spec, specs

DEVICES = [d.id for d in dl.devices()]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs(DEVICES), st.integers(0, 2**31 - 1))
def test_random_graph_matches_numpy(spec, seed):
    problems = spec.run(seed)
    assert not problems, f"{spec}\n" + "\n".join(problems)


def test_check_catches_a_wrong_element():
    spec = Spec([Source((3, 4)), Call("softmax", [0], {"axis": 1}, "host")], [1], "explicit", ["host"])
    feeds = spec.feeds(0)
    got = {"y0": spec.interpret(feeds)[1].astype(np.float32)}
    assert spec.check(got, feeds) == []
    got["y0"][1, 2] *= 1.0001
    assert spec.check(got, feeds)


def test_view_of_a_constant():
    devices = [d for d in DEVICES if dl.device(d).info.kernel_language != "python"]
    if not devices:
        pytest.skip("the host runs views as copies; the bug needs a kernel device")
    index = np.array([[2, 0, 1], [1, 1, 0]], np.int32)
    spec = Spec([Source((2, 3), "int32", value=index), Call("unsqueeze", [0], {"axes": [0]}, devices[0]),
                 Call("concat", [1, 1], {"axis": -2}, devices[0])], [2], "explicit", devices)
    assert spec.run() == []

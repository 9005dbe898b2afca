"""One run at a time on a plan (``graph/run_guard.py``): refused from another thread and from inside a run, and a
claim that a Ctrl-C cut off before its run began taken again by its own thread (a plan is not left refusing every
run), on a real plan too."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.graph.run_guard import RunGuard


def _in_thread(fn):
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


def test_another_thread_is_refused_until_the_holder_gives_it_back():
    guard = RunGuard()
    assert guard.claim() and guard.locked()
    guard.running = True
    assert _in_thread(guard.claim) is False
    guard.running = False
    guard.owner = None
    assert _in_thread(guard.claim) is True
    assert guard.claim() is False  # (held by that thread, which never gave it back)
    guard.release()
    assert not guard.locked() and guard.claim()


def test_a_run_inside_a_run_is_refused():
    guard = RunGuard()
    assert guard.claim()
    guard.running = True
    assert guard.claim() is False


def test_a_claim_whose_run_never_began_is_its_threads_to_take_again():
    guard = RunGuard()
    assert guard.claim()  # (a KeyboardInterrupt here, before the run's try: running stays False)
    assert _in_thread(guard.claim) is False
    assert guard.claim() is True


def test_a_plan_runs_again_after_an_interrupt_between_its_claim_and_its_run(device):
    g = dl.Graph()
    x = g.input("x", (4, 4))
    g.output("y", g.relu(x))
    plan = g.compile([device])
    try:
        a = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)
        plan.run_numpy({"x": a})
        assert plan._busy.claim()  # (as an interrupted call leaves it)
        other = []
        t = threading.Thread(target=lambda: other.append(pytest.raises(dl.GraphError, plan.run_numpy, {"x": a})))
        t.start()
        t.join()
        assert other and "already running" in str(other[0].value)
        np.testing.assert_array_equal(plan.run_numpy({"x": a})["y"], np.maximum(a, 0))
        assert not plan._busy.locked()
    finally:
        plan.release()


def test_a_ctrl_c_as_a_run_claims_the_plan_leaves_it_usable(device, monkeypatch):
    """KeyboardInterrupt raised just after the claim, before the run's ``try`` (where the signal check after a lock's
    acquire raised it): the next run on the thread runs."""
    g = dl.Graph()
    x = g.input("x", (4, 4))
    g.output("y", g.exp(x))
    plan = g.compile([device])
    claim = RunGuard.claim

    def claimed_then_interrupted(self):
        claim(self)
        raise KeyboardInterrupt

    try:
        a = np.random.default_rng(1).standard_normal((4, 4)).astype(np.float32)
        monkeypatch.setattr(RunGuard, "claim", claimed_then_interrupted)
        for _ in range(2):
            with pytest.raises(KeyboardInterrupt):
                plan.run_numpy({"x": a})
        monkeypatch.setattr(RunGuard, "claim", claim)
        np.testing.assert_allclose(plan.run_numpy({"x": a})["y"], np.exp(a), rtol=1e-5)
    finally:
        plan.release()

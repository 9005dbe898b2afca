"""A recorded plan's NumPy runs move their inputs and outputs through the pool's fast host arrays (pinned or
device-visible) where the pool has them (``MemoryPool.pinned_host_arrays``), and straight where it does not;
either way every run's results are right and its own."""

from __future__ import annotations

import numpy as np
import pytest

from test_lane import _feeds, _graph, _want


def _replays(plan):
    """The recorded forms of a plan's prepared runs (graph/replay.py)."""
    return [p.replay for p in plan._cache.values() if p.replay is not None]


def _run_and_check(plan, w, rng, runs=5):
    results, fed = [], []
    for _ in range(runs):
        feeds = _feeds(rng)
        got = plan.run_numpy(feeds)
        want = _want(w, feeds["x"], feeds["b"])
        feeds["x"][...] = np.nan  # the caller's arrays are theirs again once the run returned
        fed.append(want)
        results.append(got)
    for got, want in zip(results, fed):  # no later run wrote an earlier run's results
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)
    return results


def test_runs_stage_through_the_pools_fast_host_arrays_where_it_has_them(device, rng):
    g, w = _graph(rng)
    plan = g.compile([device])
    try:
        results = _run_and_check(plan, w, rng)
        replays = _replays(plan)
        if not replays:
            pytest.skip(f"{device.id} runs this plan without a recording")
        staged = [a for r in replays for a, _ in r.staging.values()]
        if device.pool.pinned_host_arrays:
            assert len(staged) == 4  # both inputs and both outputs
        else:
            assert staged == []
        for got in results:
            for arr in got.values():
                assert not any(np.shares_memory(arr, s) for s in staged)
    finally:
        plan.release()


def test_staging_forced_on_a_pool_keeps_every_run_right(device, rng, monkeypatch):
    """The staged form on every device (where the pool's host arrays are ordinary memory too): inputs copied into
    the staging arrays before each run, outputs copied out of them after, each result an array of its own."""
    monkeypatch.setattr(type(device.pool), "pinned_host_arrays", True)
    g, w = _graph(rng)
    plan = g.compile([device])
    try:
        results = _run_and_check(plan, w, rng, runs=6)
        replays = _replays(plan)
        if not replays or any(r.direct is not None for r in replays):
            pytest.skip(f"{device.id} runs this plan straight on the caller's host arrays")
        staged = [a for r in replays for a, _ in r.staging.values()]
        assert len(staged) == 4
        assert len({id(got["y"]) for got in results}) == len(results)
        for got in results:
            for arr in got.values():
                assert not any(np.shares_memory(arr, s) for s in staged)
    finally:
        plan.release()

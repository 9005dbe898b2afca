"""A recorded plan's NumPy runs move their inputs and outputs through the pool's fast host arrays (pinned or
device-visible) where the pool has them (``MemoryPool.pinned_host_arrays``), and straight where it does not;
either way every run's results are right and its own."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl

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


# -- outputs lent to the caller (``Replay.lend``) ---------------------------------------------------------------------
_BIG = (256, 512)  # 512 KiB of float32: over replay.LEND_LEAST


def _big_graph():
    g = dl.Graph()
    x = g.input("x", _BIG)
    g.output("y", g.add(g.relu(x), g.constant(np.float32(1.0))))
    g.output("m", g.reduce_max(x, axes=[1], keepdims=1))  # (small: copied out as before)
    return g


def _big_want(x):
    return np.maximum(x.astype(np.float64), 0) + 1


def _lending(device, monkeypatch):
    """The device's pool lending its host arrays (forced where it does not: the same replay code, with ordinary
    host arrays)."""
    if not device.pool.lends_host_arrays:
        monkeypatch.setattr(type(device.pool), "lends_host_arrays", True)


def _lent(plan):
    return [a for r in _replays(plan) for pairs in r.lent.values() for a, _ in pairs]


def test_a_large_output_comes_back_in_a_lent_array_used_again_once_dropped(device, rng, monkeypatch):
    _lending(device, monkeypatch)
    plan = _big_graph().compile([device])
    try:
        x = rng.standard_normal(_BIG).astype(np.float32)
        got = plan.run_numpy({"x": x})
        if not _lent(plan):
            pytest.skip(f"{device.id} runs this plan straight on the caller's host arrays")
        np.testing.assert_allclose(got["y"], _big_want(x), rtol=1e-6)
        [first] = _lent(plan)
        assert got["y"] is first and not any(np.shares_memory(got["m"], a) for a in _lent(plan))
        address = got["y"].ctypes.data
        del got, first
        x2 = rng.standard_normal(_BIG).astype(np.float32)
        again = plan.run_numpy({"x": x2})
        assert again["y"].ctypes.data == address  # nothing held the first: its array carries the second run
        assert len(_lent(plan)) == 1
        np.testing.assert_allclose(again["y"], _big_want(x2), rtol=1e-6)
    finally:
        plan.release()


def test_outputs_the_caller_holds_keep_their_values(device, rng, monkeypatch):
    """More runs than arrays to lend, every result held (whole, or only a view of it): no run writes over a
    result still referenced; beyond the lent arrays, results are copied out as before."""
    _lending(device, monkeypatch)
    plan = _big_graph().compile([device])
    try:
        held, wants = [], []
        for k in range(5):
            x = rng.standard_normal(_BIG).astype(np.float32)
            got = plan.run_numpy({"x": x})
            held.append(got["y"][3:] if k % 2 else got["y"])  # (a view keeps its array too)
            wants.append(_big_want(x)[3:] if k % 2 else _big_want(x))
            del got
        if not _lent(plan):
            pytest.skip(f"{device.id} runs this plan straight on the caller's host arrays")
        from devicelayer.graph.replay import LENT_ARRAYS

        assert len(_lent(plan)) == LENT_ARRAYS
        for arr, want in zip(held, wants):
            np.testing.assert_allclose(arr, want, rtol=1e-6)
        for i, a in enumerate(held):
            assert not any(np.shares_memory(a, b) for b in held[i + 1:])
        held.clear()  # dropped: the next run takes a lent array again
        x = rng.standard_normal(_BIG).astype(np.float32)
        got = plan.run_numpy({"x": x})
        assert any(got["y"] is a for a in _lent(plan))
        np.testing.assert_allclose(got["y"], _big_want(x), rtol=1e-6)
    finally:
        plan.release()
    np.testing.assert_allclose(got["y"], _big_want(x), rtol=1e-6)  # (still the caller's after the release)


def test_pools_that_may_not_lend_copy_their_outputs_out(device, rng, monkeypatch):
    monkeypatch.setattr(type(device.pool), "lends_host_arrays", False)
    plan = _big_graph().compile([device])
    try:
        x = rng.standard_normal(_BIG).astype(np.float32)
        got = plan.run_numpy({"x": x})
        np.testing.assert_allclose(got["y"], _big_want(x), rtol=1e-6)
        assert _lent(plan) == []
    finally:
        plan.release()


def test_an_input_in_the_pools_own_host_array_is_uploaded_without_staging(device, rng):
    """An input already in memory of the kind ``host_array`` hands out (page-locked on CUDA), such as an output a
    run lent, goes to the device in one DMA from where it lies: no staging array is made for it."""
    if not device.pool.is_host_array(device.pool.host_array((4,), np.float32)):
        pytest.skip(f"{device.id}'s host arrays are ordinary memory")
    plan = _big_graph().compile([device])
    try:
        x = device.pool.host_array(_BIG, np.float32)
        x[...] = rng.standard_normal(_BIG)
        got = plan.run_numpy({"x": x})
        np.testing.assert_allclose(got["y"], _big_want(x), rtol=1e-6)
        assert not any(a.shape == _BIG for r in _replays(plan) for a, _ in r.staging.values())
        again = plan.run_numpy({"x": got["y"]})  # a lent output as the next input
        np.testing.assert_allclose(again["y"], _big_want(got["y"]), rtol=1e-6)
        plain = rng.standard_normal(_BIG).astype(np.float32)  # an ordinary array is staged as before
        np.testing.assert_allclose(plan.run_numpy({"x": plain})["y"], _big_want(plain), rtol=1e-6)
        assert any(a.shape == _BIG for r in _replays(plan) for a, _ in r.staging.values())
    finally:
        plan.release()


def test_only_the_pools_own_kind_of_host_array_counts_as_one(device):
    assert not device.pool.is_host_array(np.zeros(_BIG, np.float32))
    for other in ([1.0, 2.0], None, np.float32(1.0)):  # (not arrays: no, and no exception)
        assert not device.pool.is_host_array(other)

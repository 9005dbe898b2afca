"""A plan's tensors as whole buffers reused across lifetimes (``graph.memory.plan_buffers``), where a device's pool
asks for them (``MemoryPool.whole_buffers``: NVIDIA's OpenCL); forced on every device present, against the arena's
plan and float64 references, outputs poisoned by the runs before."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.graph.memory import Slot, plan_arena, plan_buffers

ALL = [d.id for d in dl.devices()]


def _check_plan(slots, plan):
    by_buffer = {}
    for s in slots:
        b = plan.buffers[s.key]
        assert plan.offsets[s.key] == 0 and plan.buffer_sizes[b] >= s.nbytes
        by_buffer.setdefault(b, []).append(s)
    for held in by_buffer.values():  # no two tensors of one buffer live at one step
        held.sort(key=lambda s: s.first)
        assert all(a.last < b.first for a, b in zip(held, held[1:]))
    assert plan.peak == sum(plan.buffer_sizes) and plan.lower_bound <= plan.peak <= plan.no_reuse


def test_a_chain_takes_turns_in_two_buffers():
    slots = [Slot(k, 1000, k, k + 1) for k in range(50)]  # each value read by the next step only
    plan = plan_buffers(slots)
    _check_plan(slots, plan)
    assert len(plan.buffer_sizes) == 2 and plan.peak == 2 * 1024


def test_a_free_buffer_grows_rather_than_a_new_one_is_made():
    slots = [Slot("small", 100, 0, 1), Slot("big", 5000, 2, 3)]
    plan = plan_buffers(slots, alignment=256)
    _check_plan(slots, plan)
    assert plan.buffer_sizes == [5120]


@pytest.mark.parametrize("seed", range(20))
def test_random_lifetimes_never_share_a_buffer_at_one_step(seed):
    rng = np.random.default_rng(seed)
    slots = []
    for k in range(int(rng.integers(1, 60))):
        first = int(rng.integers(0, 40))
        slots.append(Slot(("v", k), int(rng.integers(1, 1 << 20)), first, first + int(rng.integers(0, 8))))
    plan = plan_buffers(slots)
    _check_plan(slots, plan)
    live = max(sum(1 for s in slots if s.first <= t <= s.last) for t in range(50))
    assert len(plan.buffer_sizes) <= live  # a new buffer only where every one is busy
    assert plan.lower_bound == plan_arena(slots).lower_bound


def test_no_slots_no_buffers():
    plan = plan_buffers([])
    assert plan.buffer_sizes == [] and plan.peak == 0


def _graph():
    g = dl.Graph()
    x = g.input("x", (4, 300))
    y = x
    for op in ["sigmoid", "tanh"] * 8:
        y = getattr(g, op)(y)
    z = g.add(g.relu(x), y)  # x's relu lives across the chain
    g.output("y", g.mul(z, g.constant(np.full((4, 300), 0.5, np.float32))))
    g.output("side", g.exp(g.relu(x)))
    return g


def _reference(xv):
    x = xv.astype(np.float64)
    y = x
    for _ in range(8):
        y = np.tanh(1 / (1 + np.exp(-y)))
    r = np.maximum(x, 0)
    return {"y": (r + y) * 0.5, "side": np.exp(r)}


@pytest.mark.parametrize("dev", ALL)
def test_a_plan_in_whole_buffers_matches_the_arenas_plan(dev, rng, monkeypatch):
    device = dl.device(dev)
    arena = _graph().compile([device], fuse=False)
    monkeypatch.setattr(device.pool, "whole_buffers", True)
    whole = _graph().compile([device], fuse=False)
    mem_arena, mem_whole = arena.memory_report()[dev], whole.memory_report()[dev]
    assert mem_whole["no_reuse"] == mem_arena["no_reuse"]
    assert mem_whole["lower_bound"] <= mem_whole["peak"] < mem_whole["no_reuse"]  # buffers are reused
    views = [b for b in whole._prepared.bufs.values() if b is not None]
    assert views and all(b.offset == 0 for b in views)
    for _ in range(3):  # (each run leaves its values in the buffers the next one reuses)
        xv = rng.standard_normal((4, 300)).astype(np.float32)
        got, ref = whole(x=xv), arena(x=xv)
        for name, want in _reference(xv).items():
            np.testing.assert_allclose(got[name].astype(np.float64), want, rtol=2e-5, atol=2e-5)
            np.testing.assert_array_equal(got[name], ref[name])


def test_only_nvidias_opencl_asks_for_whole_buffers():
    for d in dl.devices():
        want = d.info.backend == "opencl" and "nvidia" in d.info.vendor.lower()
        assert d.pool.whole_buffers is want, d.id

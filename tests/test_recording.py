"""Recordings: work recorded once and replayed as one submission, on every device."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl
from kernels import INCREMENT, SCALE_ADD, source


def _chain(device, rng, n=1000):
    """A recording of y += 2x; y += 2x (in place, so order matters); x -> z copy; buffers poisoned."""
    sa = device.compile(source(SCALE_ADD, device), "scale_add")
    x = device.pool.allocate(4 * n, np.float32)
    y = device.pool.allocate(4 * n, np.float32)
    z = device.pool.allocate(4 * n, np.float32)
    rec = device.record()
    rec.launch(sa, [y, x, 2.0, n], n)
    rec.launch(sa, [y, x, 2.0, n], n)
    rec.copy(z, y)
    rec.finish()
    return rec, x, y, z


def test_replay_runs_every_item_in_order(device, rng):
    n = 1000
    rec, x, y, z = _chain(device, rng, n)
    for _ in range(3):
        xv = rng.standard_normal(n).astype(np.float32)
        yv = rng.standard_normal(n).astype(np.float32)
        device.pool.upload(x, xv)
        device.pool.upload(y, yv)
        device.pool.upload(z, np.full(n, np.nan, np.float32))  # poisoned: an item that did not run shows
        ev = rec.replay()
        out = np.empty(n, np.float32)
        device.pool.download(z, out, [ev]).wait(30)
        np.testing.assert_allclose(out, yv + 4 * xv, rtol=1e-6, atol=1e-6)
    rec.release()
    for b in (x, y, z):
        device.pool.free(b)


def test_replay_waits_for_events_of_other_devices(device, rng):
    n = 257
    inc = device.compile(source(INCREMENT, device), "increment")
    v = device.pool.allocate(4 * n, np.int32)
    rec = device.record()
    for _ in range(5):
        rec.launch(inc, [v, n], n)
    rec.finish()
    data = rng.integers(-1000, 1000, n).astype(np.int32)
    device.pool.upload(v, data)
    gate = dl.UserEvent("gate")
    ev = rec.replay(wait=[gate])
    out = np.empty(n, np.int32)
    got = device.pool.download(v, out, [ev])
    assert not got.done
    gate.set()
    got.wait(30)
    np.testing.assert_array_equal(out, data + 5)
    rec.release()
    device.pool.free(v)


def test_recording_misuse(device, rng):
    rec, x, y, z = _chain(device, rng)
    sa = device.compile(source(SCALE_ADD, device), "scale_add")
    with pytest.raises(dl.InvalidArgument, match="after finish"):
        rec.launch(sa, [y, x, 2.0, 4], 4)
    fresh = device.record()
    with pytest.raises(dl.InvalidArgument, match="before finish"):
        fresh.replay()
    with pytest.raises(dl.InvalidArgument, match="arguments"):
        fresh.launch(sa, [y, x], 4)  # checked when recorded, like a launch
    with pytest.raises(dl.InvalidArgument, match="overlap"):
        fresh.copy(y, y)
    device.pool.free(z)
    with pytest.raises(dl.InvalidArgument, match="freed"):
        rec.replay()  # a buffer it names was freed
    rec.release()
    with pytest.raises(dl.InvalidArgument, match="release"):
        rec.replay()
    device.pool.free(x)
    device.pool.free(y)
    # the device still works
    v = device.pool.allocate(16, np.float32)
    device.pool.upload(v, np.arange(4, dtype=np.float32)).wait(30)
    device.pool.free(v)


def test_a_buffer_freed_after_replays_is_refused_on_every_later_replay(device, rng):
    """Replays check their buffers again whenever any buffer was freed since their last check: one freed elsewhere
    leaves them running, one of their own refuses them each time, and frees on another device count too."""
    rec, x, y, z = _chain(device, rng)
    rec.replay().wait(30)
    rec.replay().wait(30)
    other = device.pool.allocate(64, np.float32)
    device.pool.free(other)
    rec.replay().wait(30)
    host = dl.device("host")
    on_host = host.pool.allocate(64, np.float32)
    host.pool.free(on_host)
    rec.replay().wait(30)
    device.pool.free(y)
    for _ in range(2):
        with pytest.raises(dl.InvalidArgument, match="freed"):
            rec.replay()
    rec.release()
    device.pool.free(x)
    device.pool.free(z)


def test_released_recording_refuses_every_use(device, rng):
    """Releasing twice is a typed error, as Device.release of a program is; so is recording into a released
    recording, finished or not."""
    rec, x, y, z = _chain(device, rng)
    sa = device.compile(source(SCALE_ADD, device), "scale_add")
    rec.release()
    with pytest.raises(dl.InvalidArgument, match="already released"):
        rec.release()
    fresh = device.record()
    fresh.release()
    for use in (lambda: fresh.launch(sa, [y, x, 2.0, 4], 4), lambda: fresh.copy(z, y), lambda: fresh.finish(),
                lambda: fresh.replay()):
        with pytest.raises(dl.InvalidArgument, match="after release"):
            use()
    with pytest.raises(dl.InvalidArgument, match="already released"):
        fresh.release()
    for b in (x, y, z):
        device.pool.free(b)


def test_plan_recorded_and_node_by_node_agree(device, rng):
    g = dl.Graph()
    x = g.input("x", (4, 33))
    w = rng.standard_normal((33, 17)).astype(np.float32)
    h = g.relu(g.matmul(x, w))
    y = g.softmax(g.mul(h, g.sigmoid(h)), axis=-1)
    g.output("y", y)
    g.output("h", h)
    recorded = g.compile([device])
    stepwise = g.compile([device], record=False)
    for _ in range(3):
        xv = rng.standard_normal((4, 33)).astype(np.float32)
        a, b = recorded(x=xv), stepwise(x=xv)
        for k in ("y", "h"):
            np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-6)
        ref = np.maximum(xv.astype(np.float64) @ w, 0)
        np.testing.assert_allclose(a["h"], ref, rtol=1e-4, atol=1e-4)
    tensors = recorded.run({"x": dl.tensor(xv, device)})
    np.testing.assert_allclose(tensors["y"].numpy(), b["y"], rtol=1e-5, atol=1e-6)
    for t in tensors.values():
        device.pool.free(t.buffer)
    recorded.release()
    stepwise.release()

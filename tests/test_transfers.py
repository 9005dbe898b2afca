"""transfer() between every ordered pair of pools present, and the staged path."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl
import importlib

transfer_module = importlib.import_module("devicelayer.transfer")


@pytest.mark.parametrize("n", [1, 12345, 3 * (1 << 20) + 5])
def test_transfer_every_pair(device_pair, rng, n):
    src_dev, dst_dev = (dl.device(i) for i in device_pair)
    data = rng.integers(0, 256, n, dtype=np.uint8)
    src = src_dev.pool.allocate(n)
    up = src_dev.pool.upload(src, data)
    dst, ev = dl.transfer(src, dst_dev.pool, wait=[up])
    assert dst.pool is dst_dev.pool and dst.nbytes == n
    out = np.full(n, 0x7F, np.uint8)
    dst_dev.pool.download(dst, out, wait=[ev]).wait(60)
    np.testing.assert_array_equal(out, data)
    src_dev.pool.free(src)
    dst_dev.pool.free(dst)


@pytest.mark.parametrize("n", [96, 12345])
def test_round_trips_never_block_and_see_every_write(device_pair, rng, n):
    """A -> B -> A with nothing waited for on the host in between: the copy back reads what the first copy wrote,
    also where a driver reads pageable host memory when a copy is enqueued rather than when it runs."""
    a, b = (dl.device(i) for i in device_pair)
    for _ in range(20):
        data = rng.integers(0, 256, n, dtype=np.uint8)
        src = a.pool.allocate(n)
        up = a.pool.upload(src, data)
        there, ev = dl.transfer(src, b.pool, wait=[up])
        back, ev2 = dl.transfer(there, a.pool, wait=[ev])
        out = np.full(n, 0x7F, np.uint8)
        a.pool.download(back, out, wait=[ev2]).wait(60)
        np.testing.assert_array_equal(out, data)
        for buf, pool in ((src, a.pool), (there, b.pool), (back, a.pool)):
            pool.free(buf)


def test_transfer_comes_after_work_queued_on_a_host_buffer(device_pair, rng):
    """Work on one device runs in submission order, transfers included: a copy out of (or into) a host buffer
    comes after host work queued on that buffer, though the copy is submitted elsewhere and names no wait."""
    a, b = (dl.device(i) for i in device_pair)
    if not (a.pool.maps_host_memory or b.pool.maps_host_memory):
        pytest.skip("neither side is host memory")
    n = 4096
    data = rng.integers(0, 256, n, dtype=np.uint8)
    src = a.pool.allocate(n)
    a.pool.upload(src, np.zeros(n, np.uint8)).wait(60)
    gate = dl.UserEvent("gate")
    queued = a.pool.upload(src, data, wait=[gate])  # pending work that writes src
    dst, ev = dl.transfer(src, b.pool)
    gate.set()
    out = np.full(n, 0x7F, np.uint8)
    b.pool.download(dst, out, wait=[ev]).wait(60)
    queued.wait(60)
    np.testing.assert_array_equal(out, data)
    a.pool.free(src)
    b.pool.free(dst)


def test_transfer_keeps_dtype_and_views(device_pair, rng):
    src_dev, dst_dev = (dl.device(i) for i in device_pair)
    data = rng.standard_normal(1000).astype(np.float32)
    src = src_dev.pool.allocate(data.nbytes, np.float32)
    src_dev.pool.upload(src, data).wait()
    view = src.view(400, 2000)
    dst, ev = dl.transfer(view, dst_dev.pool)
    assert dst.dtype == np.float32
    out = np.empty(500, np.float32)
    dst_dev.pool.download(dst, out, wait=[ev]).wait(60)
    np.testing.assert_array_equal(out, data[100:600])
    src_dev.pool.free(src)
    dst_dev.pool.free(dst)


def test_transfer_failure_propagates(device_pair):
    src_dev, dst_dev = (dl.device(i) for i in device_pair)
    src = src_dev.pool.allocate(64)
    gate = dl.UserEvent("source not ready")
    dst, ev = dl.transfer(src, dst_dev.pool, wait=[gate])
    gate.fail("broken upstream")
    with pytest.raises(dl.EventError):
        ev.wait(30)
    src_dev.pool.free(src)
    dst_dev.pool.free(dst)


def test_staged_path_in_chunks(device, rng, monkeypatch):
    """The chunked, double-buffered staging path, forced on one pool with a small chunk size."""
    monkeypatch.setattr(transfer_module, "STAGING_CHUNK", 4096)
    n = 4096 * 7 + 123
    data = rng.integers(0, 256, n, dtype=np.uint8)
    src = device.pool.allocate(n)
    device.pool.upload(src, data).wait()
    dst = device.pool.allocate(n)
    ev = transfer_module._staged(dst, src, ())
    out = np.empty(n, np.uint8)
    device.pool.download(dst, out, wait=[ev]).wait(60)
    np.testing.assert_array_equal(out, data)
    device.pool.free(src)
    device.pool.free(dst)

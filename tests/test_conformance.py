"""The conformance suite: the same tests on every device present."""

from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.memory import settle
from kernels import INCREMENT, SCALE_ADD, source

POISON = 0x7F  # bytes written into every destination before a run, so unwritten elements show


def upload(dev, array):
    buf = dev.pool.allocate(array.nbytes, array.dtype)
    dev.pool.upload(buf, array).wait()
    return buf


def download(dev, buf, dtype, wait=()):
    out = np.full(buf.nbytes // np.dtype(dtype).itemsize, 0, dtype)
    out.view(np.uint8)[:] = POISON
    dev.pool.download(buf, out, wait).wait()
    return out


# -- info ------------------------------------------------------------------------------
def test_info_is_complete(device):
    i = device.info
    assert i.id == device.id and dl.device(i.id) is device
    assert i.name and i.vendor and i.driver_version and i.api_version
    assert i.memory_total > 0 and 0 < i.max_allocation
    assert i.compute_units >= 1 and i.max_work_group_size >= 1 and len(i.max_work_item_sizes) >= 1
    assert {"float32", "int32"} <= i.dtypes
    assert i.kernel_language in ("python", "opencl-c", "glsl", "cuda-c")
    assert 0 <= device.pool.free_bytes <= device.pool.total_bytes


# -- memory ----------------------------------------------------------------------------
@pytest.mark.parametrize("nbytes", [1, 4, 4097, (1 << 20) + 3])
def test_allocate_free_accounting(device, nbytes):
    pool = device.pool
    assert settle()  # earlier tests' dropped buffers released now, not while this one counts
    before_bytes, before_live = pool.allocated_bytes, pool.live_buffers
    buf = pool.allocate(nbytes)
    assert buf.nbytes == nbytes and not buf.freed
    assert pool.allocated_bytes == before_bytes + nbytes and pool.live_buffers == before_live + 1
    pool.free(buf).wait(5)
    assert buf.freed
    assert pool.allocated_bytes == before_bytes and pool.live_buffers == before_live


@pytest.mark.parametrize("dtype", ["float32", "int32", "uint8", "float64", "int64", "float16"])
@pytest.mark.parametrize("n", [1, 7, 1000, 65537])
def test_roundtrip_random(device, rng, dtype, n):
    if dtype not in device.info.dtypes:
        pytest.skip(f"{device.id} has no {dtype}")
    data = rng.standard_normal(n).astype(dtype) if dtype.startswith("float") else \
        rng.integers(-100 if dtype[0] == "i" else 0, 100, n).astype(dtype)
    buf = upload(device, data)
    out = download(device, buf, dtype)
    np.testing.assert_array_equal(out, data)
    device.pool.free(buf)


def test_upload_from_noncontiguous_array(device, rng):
    base = rng.standard_normal((64, 2)).astype(np.float32)
    strided = base[:, 0]
    buf = upload(device, strided)
    np.testing.assert_array_equal(download(device, buf, np.float32), strided)
    device.pool.free(buf)


def test_views_share_storage(device, rng):
    align = max(device.info.view_alignment, 16)
    n = 4 * align + 64
    data = rng.integers(0, 255, n, dtype=np.uint8)
    buf = upload(device, data)
    v = buf.view(align, 2 * align)
    assert v.root is buf and v.nbytes == 2 * align and v.offset == align
    np.testing.assert_array_equal(download(device, v, np.uint8), data[align:3 * align])
    patch = rng.integers(0, 255, 2 * align, dtype=np.uint8)
    device.pool.upload(v, patch).wait()
    expect = data.copy()
    expect[align:3 * align] = patch
    np.testing.assert_array_equal(download(device, buf, np.uint8), expect)
    vv = v.view(3, 5)  # a view of a view, at an unaligned offset: fine for transfers
    np.testing.assert_array_equal(download(device, vv, np.uint8), expect[align + 3:align + 8])
    device.pool.free(buf)
    assert v.freed and vv.freed


def test_copy_within_pool(device, rng):
    data = rng.standard_normal(5000).astype(np.float32)
    src = upload(device, data)
    dst = device.pool.allocate(src.nbytes, np.float32)
    device.pool.copy(dst, src).wait()
    np.testing.assert_array_equal(download(device, dst, np.float32), data)
    # between views of one buffer (not overlapping)
    big = upload(device, rng.integers(0, 255, 1024, dtype=np.uint8))
    expect = download(device, big, np.uint8)
    device.pool.copy(big.view(512, 100), big.view(3, 100)).wait()
    expect[512:612] = expect[3:103]
    np.testing.assert_array_equal(download(device, big, np.uint8), expect)
    for b in (src, dst, big):
        device.pool.free(b)


def test_host_array_roundtrip(device, rng):
    pinned = device.pool.host_array((300,), np.float32)
    pinned[:] = rng.standard_normal(300)
    buf = upload(device, pinned)
    np.testing.assert_array_equal(download(device, buf, np.float32), pinned)
    device.pool.free(buf)


# -- compile and launch ----------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 1000, 100_003])
def test_launch_with_buffers_and_scalars(device, rng, n):
    prog = device.compile(source(SCALE_ADD, device), "scale_add")
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    a = float(rng.standard_normal())
    bx, by = upload(device, x), upload(device, y)
    ev = device.launch(prog, [by, bx, a, n], n)
    out = download(device, by, np.float32, [ev])
    np.testing.assert_allclose(out, (y.astype(np.float64) + np.float32(a) * x.astype(np.float64)), rtol=1e-5, atol=1e-6)
    device.pool.free(bx)
    device.pool.free(by)


def test_launch_with_explicit_local_size(device, rng):
    prog = device.compile(source(SCALE_ADD, device), "scale_add")
    local = min(64, device.info.max_work_group_size, device.info.max_work_item_sizes[0])
    n = local * 5 - 3
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    bx, by = upload(device, x), upload(device, y)
    device.launch(prog, [by, bx, np.float32(2.0), np.int32(n)], local * 5, local).wait()
    np.testing.assert_allclose(download(device, by, np.float32), y + 2 * x, rtol=1e-5, atol=1e-5)
    device.pool.free(bx)
    device.pool.free(by)


def test_launch_on_views(device, rng):
    prog = device.compile(source(SCALE_ADD, device), "scale_add")
    align = max(device.info.view_alignment, 4)
    n, skip = 300, align // 4
    x = rng.standard_normal(n + skip).astype(np.float32)
    y = rng.standard_normal(n + skip).astype(np.float32)
    bx, by = upload(device, x), upload(device, y)
    vy, vx = by.view(align, n * 4), bx.view(align, n * 4)
    device.launch(prog, [vy, vx, 3.0, n], n).wait()
    expect = y.copy()
    expect[skip:skip + n] += np.float32(3.0) * x[skip:skip + n]
    np.testing.assert_allclose(download(device, by, np.float32), expect, rtol=1e-5, atol=1e-5)
    device.pool.free(bx)
    device.pool.free(by)


def test_compile_is_cached_and_release(device):
    src = source(INCREMENT, device)
    p1 = device.compile(src, "increment")
    assert device.compile(src, "increment") is p1
    assert [a.kind for a in p1.signature] == ["buffer", "scalar"]
    device.release(p1)
    with pytest.raises(dl.InvalidArgument, match="released"):
        device.launch(p1, [device.pool.allocate(4), 1], 1)
    p2 = device.compile(src, "increment")
    assert p2 is not p1


def test_chain_of_dependent_launches(device):
    prog = device.compile(source(INCREMENT, device), "increment")
    n = 257
    buf = upload(device, np.zeros(n, np.int32) + 5)
    ev = None
    for _ in range(120):
        ev = device.launch(prog, [buf, n], n, wait=[ev] if ev else [])
    out = download(device, buf, np.int32, [ev])
    np.testing.assert_array_equal(out, np.full(n, 125, np.int32))
    device.pool.free(buf)


def test_launch_waiting_on_user_event_does_not_block(device):
    prog = device.compile(source(INCREMENT, device), "increment")
    buf = upload(device, np.arange(10, dtype=np.int32))
    gate = dl.UserEvent("gate")
    t0 = time.perf_counter()
    ev = device.launch(prog, [buf, 10], 10, wait=[gate])
    follow = device.launch(prog, [buf, 10], 10)  # in order: runs after the gated launch
    assert time.perf_counter() - t0 < 1.0
    time.sleep(0.05)
    assert not ev.done and not follow.done
    gate.set()
    follow.wait(30)
    assert ev.done and ev.error is None
    np.testing.assert_array_equal(download(device, buf, np.int32), np.arange(10) + 2)
    device.pool.free(buf)


def test_failure_propagates_along_a_chain(device):
    prog = device.compile(source(INCREMENT, device), "increment")
    buf = upload(device, np.zeros(16, np.int32))
    gate = dl.UserEvent("upstream")
    ev = device.launch(prog, [buf, 16], 16, wait=[gate])
    chain = [ev]
    for _ in range(5):
        chain.append(device.launch(prog, [buf, 16], 16, wait=[chain[-1]]))
    out = np.empty(16, np.int32)
    dl_ev = device.pool.download(buf, out, wait=[chain[-1]])
    cause = RuntimeError("upstream broke")
    gate.fail(cause)
    with pytest.raises(dl.EventError) as info:
        dl_ev.wait(30)
    err, seen = info.value, []
    while err is not None:
        seen.append(err)
        err = err.__cause__
    assert cause in seen
    for e in chain:
        assert e.done and isinstance(e.error, dl.DeviceLayerError)
    # the device still works
    ok = device.launch(prog, [buf, 16], 16)
    np.testing.assert_array_equal(download(device, buf, np.int32, [ok]), np.ones(16, np.int32))
    device.pool.free(buf)


def test_wait_list_mixing_two_backends(device):
    others = [d for d in dl.devices() if d.info.backend != device.info.backend]
    if not others:
        pytest.skip("only one backend present")
    other = others[0]
    n = 1000
    a = np.arange(n, dtype=np.int32)
    buf = device.pool.allocate(a.nbytes, np.int32)
    obuf = other.pool.allocate(a.nbytes, np.int32)
    e_here = device.pool.upload(buf, a)
    e_there = other.pool.upload(obuf, a * 2)
    prog = device.compile(source(INCREMENT, device), "increment")
    ev = device.launch(prog, [buf, n], n, wait=[e_here, e_there])
    out = download(device, buf, np.int32, [ev])
    np.testing.assert_array_equal(out, a + 1)
    assert e_there.done
    device.pool.free(buf)
    other.pool.free(obuf)


def test_chain_alternating_between_backends(device):
    others = [d for d in dl.devices() if d.info.backend != device.info.backend]
    if not others:
        pytest.skip("only one backend present")
    other, n = others[0], 64
    here_p = device.compile(source(INCREMENT, device), "increment")
    there_p = other.compile(source(INCREMENT, other), "increment")
    hb = upload(device, np.zeros(n, np.int32))
    tb = upload(other, np.zeros(n, np.int32))
    ev = None
    for i in range(100):
        dev, prog, buf = (device, here_p, hb) if i % 2 == 0 else (other, there_p, tb)
        ev = dev.launch(prog, [buf, n], n, wait=[ev] if ev else [])
    ev.wait(60)
    np.testing.assert_array_equal(download(device, hb, np.int32), np.full(n, 50))
    np.testing.assert_array_equal(download(other, tb, np.int32), np.full(n, 50))
    device.pool.free(hb)
    other.pool.free(tb)


def test_free_waits_for_pending_work(device):
    prog = device.compile(source(INCREMENT, device), "increment")
    pool = device.pool
    assert settle()
    before = pool.live_buffers
    buf = upload(device, np.zeros(32, np.int32))
    gate = dl.UserEvent()
    ev = device.launch(prog, [buf, 32], 32, wait=[gate])
    released = pool.free(buf)
    assert buf.freed and not released.done and pool.live_buffers == before + 1
    gate.set()
    released.wait(30)
    assert ev.done and ev.error is None and pool.live_buffers == before


def test_event_keeps_host_array_alive(device, rng):
    data = rng.standard_normal(200_000).astype(np.float32)
    expect = data.copy()
    buf = device.pool.allocate(data.nbytes, np.float32)
    gate = dl.UserEvent()
    ev = device.pool.upload(buf, data, wait=[gate])
    del data
    gc.collect()
    gate.set()
    ev.wait(30)
    np.testing.assert_array_equal(download(device, buf, np.float32), expect)
    device.pool.free(buf)


def test_synchronize_and_concurrent_submitters(device):
    prog = device.compile(source(INCREMENT, device), "increment")
    bufs = [upload(device, np.zeros(100, np.int32)) for _ in range(4)]

    def work(b):
        for _ in range(25):
            device.launch(prog, [b, 100], 100)

    threads = [threading.Thread(target=work, args=(b,)) for b in bufs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    device.synchronize()
    for b in bufs:
        np.testing.assert_array_equal(download(device, b, np.int32), np.full(100, 25))
        device.pool.free(b)

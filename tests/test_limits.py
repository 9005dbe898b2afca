"""Limits the device states and types buffers carry, checked by the layer above the backends, on every device.

No test here runs a launch beyond a limit or writes memory beyond the device's: sizes are refused before a
driver sees them, and the allocations that fill a device are never written.
"""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.geometry import MAX_GLOBAL_EXTENT
from devicelayer.signature import buffer_fits
from devicelayer.transfer import copy_between
from kernels import FLIP, INCREMENT, source


def _still_works(device):
    """A launch and a round trip give the right results."""
    prog = device.compile(source(INCREMENT, device), "increment")
    buf = device.pool.allocate(64, np.int32)
    device.pool.upload(buf, np.arange(16, dtype=np.int32))
    ev = device.launch(prog, [buf, 16], 16)
    out = np.empty(16, np.int32)
    device.pool.download(buf, out, [ev]).wait(30)
    np.testing.assert_array_equal(out, np.arange(16) + 1)
    device.pool.free(buf)


# -- launch sizes ------------------------------------------------------------------------------------------------
def test_global_size_beyond_a_32_bit_index_is_refused(device):
    """2**32 + 16 work items: ids past 2**31 - 1 wrap negative in an int index and write before the buffer (PoCL
    crashed); every device refuses it, launched or recorded, naming the size and the limit."""
    prog = device.compile(source(INCREMENT, device), "increment")
    buf = device.pool.allocate(64, np.int32)
    for size, axis in (((1 << 32) + 16, 0), (MAX_GLOBAL_EXTENT + 1, 0), ((16, MAX_GLOBAL_EXTENT + 1), 1)):
        extent = size[axis] if isinstance(size, tuple) else size
        with pytest.raises(dl.InvalidArgument, match=f"{extent} work items in dimension {axis}, more than "
                                                     f"{MAX_GLOBAL_EXTENT}"):
            device.launch(prog, [buf, 16], size)
        with pytest.raises(dl.InvalidArgument, match="32-bit ints"):
            device.record().launch(prog, [buf, 16], size)
    device.pool.free(buf)
    _still_works(device)


def test_total_work_items_beyond_the_device_are_refused(device):
    info = device.info
    prog = device.compile(source(INCREMENT, device), "increment")
    buf = device.pool.allocate(64, np.int32)
    with pytest.raises(dl.InvalidArgument, match=f"more than the {info.max_global_items} one launch"):
        device.launch(prog, [buf, 16], (MAX_GLOBAL_EXTENT,) * 3)
    device.pool.free(buf)
    _still_works(device)


def test_work_groups_beyond_the_device_are_refused(device):
    """More work-groups in a dimension than the device states, with the work-group size given or the backend's."""
    info = device.info
    prog = device.compile(source(INCREMENT, device), "increment")
    buf = device.pool.allocate(64, np.int32)
    refused = 0
    for axis in range(min(len(info.max_work_groups), 3)):
        groups = info.max_work_groups[axis] + 1
        if groups > MAX_GLOBAL_EXTENT:
            continue  # no launch may have that many work items: the group count cannot be reached
        size = [1] * (axis + 1)
        size[axis] = groups
        with pytest.raises(dl.InvalidArgument, match=f"more than the device's .* in dimension {axis}"):
            device.launch(prog, [buf, 16], tuple(size), (1,) * (axis + 1))
        refused += 1
    if info.max_work_groups[0] * 64 <= MAX_GLOBAL_EXTENT and info.backend == "vulkan":
        with pytest.raises(dl.InvalidArgument, match="work-groups of \\(64, 1, 1\\)"):
            device.launch(prog, [buf, 16], info.max_work_groups[0] * 64 + 1)  # the default group of 64
    device.pool.free(buf)
    if not refused:
        pytest.skip(f"{device.id} states no work-group count a launch can exceed")
    _still_works(device)


def test_work_group_sizes_beyond_the_device_are_refused(device):
    info = device.info
    prog = device.compile(source(INCREMENT, device), "increment")
    buf = device.pool.allocate(64, np.int32)
    for axis, cap in enumerate(info.max_work_item_sizes[:3]):
        if cap >= MAX_GLOBAL_EXTENT:
            continue
        local = [1] * (axis + 1)
        local[axis] = cap + 1
        with pytest.raises(dl.InvalidArgument, match=f"exceeds the device's limit .* in dimension {axis}"):
            device.launch(prog, [buf, 16], tuple(local), tuple(local))
    side = int(info.max_work_group_size ** 0.5) + 1
    if side <= min(info.max_work_item_sizes[:2]):
        with pytest.raises(dl.InvalidArgument, match="work items per group"):
            device.launch(prog, [buf, 16], (side, side), (side, side))
    device.pool.free(buf)
    _still_works(device)


@pytest.mark.parametrize("size", [0, -1, -(1 << 40), True, False, np.bool_(True), 2.0, "16", (), (4, 0), (4, True),
                                  (1, 1, 1, 1), [4, -4], None])
def test_malformed_global_sizes_are_refused(device, size):
    prog = device.compile(source(INCREMENT, device), "increment")
    buf = device.pool.allocate(64, np.int32)
    with pytest.raises(dl.InvalidArgument, match="global_size"):
        device.launch(prog, [buf, 16], size)
    with pytest.raises(dl.InvalidArgument, match="local_size"):
        device.launch(prog, [buf, 16], 16, size if size is not None else 0)
    device.pool.free(buf)


# -- pool accounting ---------------------------------------------------------------------------------------------
def _fill(pool, size):
    """Allocate ``size`` bytes at a time until the pool refuses (never written); the buffers and the error."""
    held = []
    for _ in range(pool.total_bytes // size + 2):
        try:
            held.append(pool.allocate(size))
        except dl.OutOfMemory as exc:
            return held, exc
    return held, None


def test_allocations_beyond_the_device_memory_are_refused(device):
    """PoCL accepted 50 GiB of allocations on a 21.5 GiB device and aborted the process on the first upload."""
    pool = device.pool
    own = pool.allocated_bytes
    size = min(device.info.max_allocation, pool.total_bytes // 4 + 4096)
    held, refusal = _fill(pool, size)
    try:
        assert refusal is not None, f"{len(held)} allocations of {size} bytes on a {pool.total_bytes}-byte device"
        assert "cannot allocate" in str(refusal)
        assert own + len(held) * size <= pool.total_bytes
        if device.info.backend != "host":  # the host also stops at the memory the machine has available
            assert own + (len(held) + 1) * size > pool.total_bytes
    finally:
        for buf in held:
            pool.free(buf)
    device.synchronize()
    assert pool.allocated_bytes == own
    again = pool.allocate(size)  # the memory is back
    pool.free(again)
    _still_works(device)


def test_memory_of_another_library_is_not_counted_against_the_pool():
    """Adopted (DLPack) memory belongs to its library: a pool whose own buffers fill the device still holds it, and
    the memory its own buffers give back can be allocated again."""
    host = dl.device("host")
    pool = host.pool
    size = min(host.info.max_allocation, pool.total_bytes // 4 + 4096)
    held, refusal = _fill(pool, size)
    filler = None
    try:
        if refusal is None or "available" in str(refusal):
            pytest.skip("the machine has too little memory available to fill the pool's accounting")
        rest = pool.total_bytes - pool.allocated_bytes  # (less than the room left where memory was adopted before)
        if rest >= pool.free_bytes:
            pytest.skip("the machine has too little memory available to fill the pool's accounting")
        filler = pool.allocate(rest) if rest > 0 else None
        adopted = dl.from_dlpack(np.zeros(1 << 20, np.uint8))
        assert adopted.buffer.foreign is not None
        if filler is not None:
            pool.free(filler).wait(5)
            filler = pool.allocate(rest)
        adopted.free()
    finally:
        for buf in held + ([filler] if filler is not None else []):
            pool.free(buf)
    _still_works(host)


# -- typed buffers and kernel parameters -------------------------------------------------------------------------
def test_buffer_of_another_dtype_than_the_parameter_is_refused(device):
    prog = device.compile(source(INCREMENT, device), "increment")
    floats = device.pool.allocate(64, np.float32)
    with pytest.raises(dl.InvalidArgument, match=r"argument '\w+' \(int32\*\) got a buffer that holds float32"):
        device.launch(prog, [floats, 16], 16)
    with pytest.raises(dl.InvalidArgument, match="holds float32"):
        device.record().launch(prog, [floats, 16], 16)
    # an untyped buffer, and a view of the float32 one as int32, are taken
    raw = device.pool.allocate(64)
    device.pool.upload(raw.view(0, 64, np.int32), np.arange(16, dtype=np.int32))
    device.launch(prog, [raw, 16], 16)
    device.pool.upload(floats, np.zeros(16, np.float32))
    device.launch(prog, [floats.view(0, 64, np.int32), 16], 16)
    out = np.empty(16, np.int32)
    device.pool.download(raw.view(0, 64, np.int32), out).wait(30)
    np.testing.assert_array_equal(out, np.arange(16) + 1)
    device.pool.download(floats.view(0, 64, np.int32), out).wait(30)
    np.testing.assert_array_equal(out, np.ones(16))
    device.pool.free(raw)
    device.pool.free(floats)


def test_bool_buffer_goes_to_a_byte_parameter(device):
    """A bool is a byte of 0 or 1: bool and uint8 buffers both take a ``uchar*`` parameter; float32 does not."""
    prog = device.compile(source(FLIP, device), "flip")
    flags = device.pool.allocate(16, np.bool_)
    device.pool.upload(flags, np.arange(16) % 3 == 0)
    ev = device.launch(prog, [flags, 16], 16)
    out = np.empty(16, np.bool_)
    device.pool.download(flags, out, [ev]).wait(30)
    np.testing.assert_array_equal(out, np.arange(16) % 3 != 0)
    floats = device.pool.allocate(64, np.float32)
    with pytest.raises(dl.InvalidArgument, match="holds float32"):
        device.launch(prog, [floats, 16], 16)
    device.pool.free(flags)
    device.pool.free(floats)


def test_buffer_fits_rule():
    f32, i32, u8, i8, b = (np.dtype(t) for t in ("float32", "int32", "uint8", "int8", "bool"))
    assert buffer_fits(i32, i32) and buffer_fits(None, f32) and buffer_fits(i32, None)
    assert buffer_fits(u8, b) and buffer_fits(i8, b) and buffer_fits(b, u8)
    assert not buffer_fits(i32, f32) and not buffer_fits(u8, i8) and not buffer_fits(u8, f32)
    assert not buffer_fits(np.dtype("uint32"), i32)


def test_signature_type_names():
    """Only names of C types, the kernel dialect and devicelayer's dtypes have a dtype; others take any buffer."""
    sig = dl.parse_signature("void* a, T* b, f16* c, i64* d, const float* e, uchar* f, f4* g")
    assert [a.dtype for a in sig] == [None, None, np.dtype("float16"), np.dtype("int64"), np.dtype("float32"),
                                      np.dtype("uint8"), None]


# -- copies between typed buffers ----------------------------------------------------------------------------------
def test_copies_between_typed_buffers_must_agree(device):
    pool = device.pool
    f, i, raw = pool.allocate(64, np.float32), pool.allocate(64, np.int32), pool.allocate(64)
    with pytest.raises(dl.InvalidArgument, match="destination holds int32, source holds float32"):
        pool.copy(i, f)
    with pytest.raises(dl.InvalidArgument, match="destination holds int32, source holds float32"):
        device.record().copy(i, f)
    with pytest.raises(dl.InvalidArgument, match="destination holds int32, source holds float32"):
        copy_between(i, f)
    with pytest.raises(dl.InvalidArgument, match="buffer holds int32, array is float32"):
        pool.download(i, np.empty(16, np.float32))
    data = np.arange(16, dtype=np.float32)
    pool.upload(f, data)
    pool.copy(raw, f)  # an untyped side takes anything
    pool.copy(i.view(0, 64, np.uint8), f.view(0, 64, np.uint8))  # bits, through byte views
    out = np.empty(16, np.int32)
    pool.download(i, out).wait(30)
    np.testing.assert_array_equal(out, data.view(np.int32))
    moved, ev = dl.transfer(f, pool)
    assert moved.dtype == f.dtype
    ev.wait(30)
    for b in (f, i, raw, moved):
        pool.free(b)


def test_copy_between_devices_checks_dtypes(device_pair):
    a, b = (dl.device(d) for d in device_pair)
    src, dst = a.pool.allocate(64, np.float32), b.pool.allocate(64, np.int32)
    with pytest.raises(dl.InvalidArgument, match="destination holds int32, source holds float32"):
        copy_between(dst, src)
    a.pool.upload(src, np.arange(16, dtype=np.float32))
    copy_between(dst.view(0, 64, np.uint8), src.view(0, 64, np.uint8)).wait(30)
    out = np.empty(16, np.int32)
    b.pool.download(dst, out).wait(30)
    np.testing.assert_array_equal(out, np.arange(16, dtype=np.float32).view(np.int32))
    a.pool.free(src)
    b.pool.free(dst)

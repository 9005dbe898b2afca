"""DLPack and NumPy exchange: Tensor.__dlpack__/__dlpack_device__, devicelayer.from_dlpack, __array__, to(), free().

Zero copy is checked by writing through one side and reading the other; a capsule's contents by reading its
DLManagedTensor(Versioned) with devicelayer.dlpack's structures.  PyTorch and JAX (CPU) round trips run where
they are installed; CUDA ones are in test_dlpack_cuda.py.
"""

from __future__ import annotations

import ctypes
import gc
import sys
import time
import warnings

import numpy as np
import pytest

import devicelayer as dl
from devicelayer import dlpack
from devicelayer.dlpack import DLDeviceType

KINDS = {"host": DLDeviceType.kDLCPU, "opencl": DLDeviceType.kDLOpenCL, "vulkan": DLDeviceType.kDLVulkan,
         "cuda": DLDeviceType.kDLCUDA}


def _struct(capsule):
    """The DLManagedTensor(Versioned) inside an unconsumed capsule, and whether it is versioned."""
    for name, kind in ((b"dltensor_versioned", dlpack.DLManagedTensorVersioned), (b"dltensor", dlpack.DLManagedTensor)):
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        valid = ctypes.pythonapi.PyCapsule_IsValid
        valid.restype, valid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
        if valid(capsule, name):
            return kind.from_address(get(capsule, name)), kind is dlpack.DLManagedTensorVersioned
    raise AssertionError("not an unconsumed DLPack capsule")


def _settle(event, seconds=5.0):
    """Wait for an event that completes when a consumer's deleter has run (through the dispatcher)."""
    gc.collect()
    deadline = time.monotonic() + seconds
    while not event.done and time.monotonic() < deadline:
        time.sleep(0.01)
    return event.done


# -- every device -------------------------------------------------------------------------------------------
def test_dlpack_device_names_the_memory(device):
    t = dl.tensor(np.arange(4, dtype=np.float32), device)
    kind, index = t.__dlpack_device__()
    backend = device.info.backend
    if backend in KINDS:
        assert kind == KINDS[backend]
    assert index == (0 if backend == "host" else device.info.index)
    t.free()


def test_numpy_takes_a_tensor_of_any_device(device, rng):
    x = rng.standard_normal((3, 5)).astype(np.float32)
    t = dl.tensor(x, device)
    np.testing.assert_array_equal(np.asarray(t), x)
    np.testing.assert_array_equal(np.from_dlpack(t, device="cpu"), x)
    np.testing.assert_array_equal(np.asarray(t, dtype=np.float64), x.astype(np.float64))
    t.free()


def test_to_moves_between_devices_and_back(device_pair, rng):
    a, b = (dl.device(d) for d in device_pair)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    t = dl.tensor(x, a)
    moved = t.to(b)
    assert moved.device is b and moved.shape == t.shape and moved.dtype == t.dtype
    back = moved.to(a)
    np.testing.assert_array_equal(back.numpy(), x)
    assert t.to(a) is t  # already there: no copy
    for u in {id(v): v for v in (t, moved, back)}.values():
        u.free()


def test_to_of_an_empty_tensor(device_pair):
    a, b = (dl.device(d) for d in device_pair)
    t = dl.tensor(np.zeros((0, 3), np.float32), a)
    moved = t.to(b)
    assert moved.shape == (0, 3) and moved.numpy().shape == (0, 3)
    t.free()
    moved.free()


def test_export_where_a_consumer_can_take_it_else_how_to_copy(device, rng):
    x = rng.standard_normal(8).astype(np.float32)
    t = dl.tensor(x, device)
    backend = device.info.backend
    if backend == "vulkan":
        with pytest.raises(dl.DLPackError, match=r"to\('host'\)"):
            t.__dlpack__()
        with pytest.raises(BufferError):
            t.__dlpack__(max_version=(1, 0))
    else:
        capsule = t.__dlpack__(max_version=(1, 0))
        struct, versioned = _struct(capsule)
        assert versioned and struct.dl_tensor.device.device_type == t.__dlpack_device__()[0]
        back = dl.from_dlpack(capsule)  # devicelayer itself consumes it: the same memory
        assert back.device is device
        np.testing.assert_array_equal(back.numpy(), x)
        back.free()
    # the device is still usable, and a copy to the host always works
    np.testing.assert_array_equal(np.from_dlpack(t, device="cpu"), x)
    t.free()


def test_from_dlpack_of_a_tensor_places_it(device_pair, rng):
    a, b = (dl.device(d) for d in device_pair)
    x = rng.standard_normal(5).astype(np.float32)
    t = dl.tensor(x, a)
    same = dl.from_dlpack(t)
    assert same.buffer is t.buffer
    if a is not b:
        with pytest.warns(dl.CopyWarning):
            other = dl.from_dlpack(t, device=b)
        with pytest.raises(dl.DLPackError, match="copy=False"):
            dl.from_dlpack(t, device=b, copy=False)
    else:
        other = dl.from_dlpack(t, device=b, copy=True)
        assert other.buffer is not t.buffer
    np.testing.assert_array_equal(other.numpy(), x)
    other.free()
    t.free()


def test_free_is_idempotent_and_use_after_free_is_an_error(device):
    t = dl.tensor(np.ones(4, np.float32), device)
    r = t.reshape((2, 2))
    t.free().wait()
    assert t.free().done  # a second free does nothing
    r.free()
    for call in (t.numpy, lambda: np.asarray(t), lambda: t.to("host"), t.__dlpack__, lambda: dl.from_dlpack(t)):
        with pytest.raises(dl.InvalidArgument, match="freed"):
            call()
    assert "freed" in repr(t)
    u = dl.tensor(np.ones(2, np.float32), device)  # the device still works
    np.testing.assert_array_equal(u.numpy(), 1)
    u.free()


def test_free_of_a_view_tensor_is_refused(device):
    buf = device.pool.allocate(64, np.float32)
    view = dl.Tensor(buf.view(16, 16, np.float32), (4,), np.float32)
    with pytest.raises(dl.InvalidArgument, match="view"):
        view.free()
    device.pool.free(buf)


def test_repr_says_what_the_tensor_is(device):
    t = dl.tensor(np.zeros((2, 3), np.float16), device)
    t.ready.wait()
    text = repr(t)
    assert "(2, 3)" in text and "float16" in text and device.id in text and "12 B" in text
    t.free()


# -- host memory with NumPy: zero copy both ways ---------------------------------------------------------------
def test_numpy_shares_host_memory_both_ways():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = dl.tensor(x, "host")
    a = np.from_dlpack(t)
    a[1, 2] = -5.0  # write through NumPy, read through devicelayer
    assert t.numpy()[1, 2] == -5.0
    v = np.asarray(t)
    v[0, 0] = 7.0
    assert a[0, 0] == 7.0 and np.shares_memory(a, v)

    source = np.zeros(6, np.int64)
    imported = dl.from_dlpack(source)
    assert imported.device.id == "host" and "shared with numpy" in repr(imported)
    source[3] = 42  # write through NumPy, read through devicelayer
    assert imported.numpy()[3] == 42
    np.asarray(imported)[4] = 9  # write through devicelayer's view
    assert source[4] == 9
    imported.free()
    t.free()


def test_read_only_memory_stays_read_only():
    x = np.arange(4.0)
    x.flags.writeable = False
    t = dl.from_dlpack(x)
    assert t.readonly and "read-only" in repr(t)
    assert not np.asarray(t).flags.writeable
    back = np.from_dlpack(t)  # a versioned capsule carries the flag to NumPy
    assert not back.flags.writeable and np.shares_memory(back, x)
    capsule = t.__dlpack__(max_version=(1, 0))
    assert _struct(capsule)[0].flags & dlpack.READ_ONLY
    with pytest.raises(dl.DLPackError, match="read-only"):
        t.__dlpack__()  # an unversioned capsule cannot say read-only
    copied = dl.from_dlpack(x, copy=True)
    assert not copied.readonly and not np.shares_memory(np.asarray(copied), x)
    for u in (t, copied):
        u.free()


def test_versioned_and_unversioned_capsules():
    t = dl.tensor(np.arange(6, dtype=np.int16).reshape(2, 3), "host")
    capsules = [t.__dlpack__(), t.__dlpack__(max_version=(1, 2))]  # alive while their structures are read
    old, versioned = _struct(capsules[0])
    assert not versioned
    new, versioned = _struct(capsules[1])
    assert versioned and (new.version.major, new.version.minor) == (1, 0)
    for s in (old, new):
        d = s.dl_tensor
        assert (d.device.device_type, d.device.device_id) == (1, 0)
        assert (d.dtype.code, d.dtype.bits, d.dtype.lanes) == (0, 16, 1)
        assert d.ndim == 2 and (d.shape[0], d.shape[1]) == (2, 3) and (d.strides[0], d.strides[1]) == (3, 1)
    del old, new, capsules
    t.free()


def test_copy_true_exports_a_copy_flagged_as_copied():
    t = dl.tensor(np.arange(3, dtype=np.float32), "host")
    capsule = t.__dlpack__(max_version=(1, 0), copy=True)
    assert _struct(capsule)[0].flags & dlpack.IS_COPIED
    a = np.from_dlpack(capsule_holder(capsule))
    a[0] = 100
    assert t.numpy()[0] == 0
    t.free()


def capsule_holder(capsule):
    """An object whose __dlpack__ returns ``capsule`` (NumPy takes producers, not capsules)."""
    class Holder:
        def __dlpack__(self, **_):
            return capsule

        def __dlpack_device__(self):
            return (1, 0)
    return Holder()


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                                   "float16", "float32", "float64", "complex64"])
def test_round_trip_of_every_dtype(dtype, rng):
    x = (rng.standard_normal((2, 3)) * 10).astype(dtype)
    t = dl.from_dlpack(x)
    assert t.dtype == x.dtype
    np.testing.assert_array_equal(t.numpy(), x)
    back = np.from_dlpack(t)
    assert back.dtype == x.dtype and np.shares_memory(back, x)
    t.free()


def test_bfloat16_round_trip():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.arange(5, dtype=np.float32).astype(ml_dtypes.bfloat16)
    t = dl.tensor(x, "host")
    struct, _ = _struct(t.__dlpack__(max_version=(1, 0)))
    assert (struct.dl_tensor.dtype.code, struct.dl_tensor.dtype.bits) == (dlpack.DLDataTypeCode.kDLBfloat, 16)
    back = dl.from_dlpack(t.__dlpack__(max_version=(1, 0)))
    assert back.dtype == x.dtype and np.array_equal(back.numpy().astype(np.float32), x.astype(np.float32))
    back.free()
    t.free()


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (1,), (2, 1, 3)])
def test_odd_shapes(shape):
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    t = dl.from_dlpack(x)
    assert t.shape == shape
    np.testing.assert_array_equal(np.from_dlpack(t), x)
    np.testing.assert_array_equal(np.asarray(t), x)
    t.free()


def test_strided_memory_is_copied_with_a_warning_or_refused():
    x = np.arange(24.0).reshape(4, 6)
    for view in (x[:, ::2], x[::-1], x.T):
        with pytest.warns(dl.CopyWarning, match="not C-contiguous"):
            t = dl.from_dlpack(view)
        np.testing.assert_array_equal(t.numpy(), view)
        t.free()
        with pytest.raises(dl.DLPackError, match="C-contiguous"):
            dl.from_dlpack(view, copy=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = dl.from_dlpack(x[:, ::2], copy=True)  # asked for: no warning
    t.free()


def test_host_memory_to_another_device(device, rng):
    x = rng.standard_normal(6).astype(np.float32)
    if device.info.backend == "host":
        pytest.skip("the host is where the memory is")
    with pytest.warns(dl.CopyWarning):
        t = dl.from_dlpack(x, device=device)
    assert t.device is device
    np.testing.assert_array_equal(t.numpy(), x)
    t.free()
    t = dl.from_dlpack(x, device=device, copy=True)
    np.testing.assert_array_equal(t.numpy(), x)
    t.free()


# -- lifetimes: the producer's memory lives while devicelayer uses it, and back ----------------------------------
def test_an_imported_array_is_released_when_freed():
    x = np.arange(1000, dtype=np.float32)
    before = sys.getrefcount(x)
    t = dl.from_dlpack(x)
    assert sys.getrefcount(x) > before  # the capsule's owner holds the producer's array
    t.free().wait()
    del t
    gc.collect()
    assert sys.getrefcount(x) == before


def test_free_waits_until_every_consumer_lets_go():
    t = dl.tensor(np.arange(8, dtype=np.float32), "host")
    t.ready.wait()
    a = np.from_dlpack(t)
    b = np.from_dlpack(t)
    released = t.free()
    assert not released.done  # two consumers hold the memory
    del a
    gc.collect()
    time.sleep(0.05)
    assert not released.done
    del b
    assert _settle(released)


def test_an_unused_capsule_releases_the_tensor():
    t = dl.tensor(np.arange(8, dtype=np.float32), "host")
    capsule = t.__dlpack__(max_version=(1, 0))
    released = t.free()
    del capsule
    assert _settle(released)


def test_exports_in_a_loop_do_not_pile_up():
    t = dl.tensor(np.arange(8, dtype=np.float32), "host")
    for _ in range(200):
        np.from_dlpack(t)
    gc.collect()
    time.sleep(0.2)  # the consumers' releases run on the dispatcher; the next export forgets those done
    np.from_dlpack(t)
    assert len(t.buffer._uses) < 50
    t.free()


def test_releasing_during_an_exception_keeps_the_exception():
    t = dl.tensor(np.arange(4, dtype=np.float32), "host")

    def fail_with_a_consumer_on_the_stack():
        return [np.from_dlpack(t), 1 / 0]  # the array is released while ZeroDivisionError unwinds

    with pytest.raises(ZeroDivisionError):
        fail_with_a_consumer_on_the_stack()
    assert _settle(t.free())


# -- misuse -------------------------------------------------------------------------------------------------------
def test_from_dlpack_misuse():
    with pytest.raises(dl.InvalidArgument, match="not a DLPack producer"):
        dl.from_dlpack([1, 2, 3])
    with pytest.raises(dl.InvalidArgument, match="copy"):
        dl.from_dlpack(np.zeros(2), copy="yes")
    with pytest.raises(dl.DeviceNotFound):
        dl.from_dlpack(np.zeros(2), device="nosuch:0")
    capsule = np.zeros(3).__dlpack__()
    dl.from_dlpack(capsule).free()
    with pytest.raises(dl.InvalidArgument, match="already consumed"):
        dl.from_dlpack(capsule)

    class Broken:
        def __dlpack__(self, **_):
            raise BufferError("cannot export")

        def __dlpack_device__(self):
            return (1, 0)
    with pytest.raises(dl.DLPackError, match="cannot export"):
        dl.from_dlpack(Broken())

    class Elsewhere:  # memory on a device no devicelayer backend addresses, and no host copy on offer
        def __dlpack__(self, **kw):
            raise BufferError("no copy to the host")

        def __dlpack_device__(self):
            return (DLDeviceType.kDLHexagon, 0)
    with pytest.raises(dl.DLPackError, match="kDLHexagon"):
        dl.from_dlpack(Elsewhere())
    with pytest.raises(dl.DLPackError, match="copy=False"):
        dl.from_dlpack(Elsewhere(), copy=False)


def test_dlpack_export_misuse():
    t = dl.tensor(np.zeros(3, np.float32), "host")
    with pytest.raises(dl.DLPackError, match="max_version"):
        t.__dlpack__(max_version="1.0")
    with pytest.raises(dl.DLPackError, match="dl_device"):
        t.__dlpack__(dl_device="cpu")
    with pytest.raises(dl.DLPackError, match="kDLCUDA"):
        t.__dlpack__(dl_device=(DLDeviceType.kDLCUDA, 0))
    with pytest.raises(dl.DLPackError, match="stream"):
        t.__dlpack__(stream=5)  # host memory takes no stream
    with pytest.raises(dl.InvalidArgument, match="copy"):
        t.__dlpack__(copy=1)
    with pytest.raises(TypeError):
        t.__dlpack__(None)  # keyword-only, as the array API has it
    np.testing.assert_array_equal(np.from_dlpack(t), 0)  # still usable
    t.free()


def test_array_copy_false_off_the_host(device):
    t = dl.tensor(np.ones(3, np.float32), device)
    if device.info.backend == "host":
        assert np.shares_memory(t.__array__(copy=False), t.__array__(copy=False))
        with pytest.raises(ValueError):
            t.__array__(np.float64, copy=False)
    else:
        with pytest.raises(ValueError, match="copy"):
            t.__array__(copy=False)
        if device.pool.host_address(t.buffer) is None:
            with pytest.raises(dl.DLPackError, match="copy=False"):
                t.__dlpack__(dl_device=(1, 0), copy=False)
        else:  # mapped memory of a unified device: the host takes it as it is
            np.testing.assert_array_equal(np.from_dlpack(t, device="cpu", copy=False), 1)
    t.free()


# -- PyTorch and JAX on the CPU ----------------------------------------------------------------------------------
def test_torch_shares_host_memory_both_ways():
    torch = pytest.importorskip("torch")
    t = dl.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), "host")
    tt = torch.from_dlpack(t)
    assert tt.shape == (2, 3) and tt.dtype == torch.float32
    tt[0, 1] = 50.0  # write through PyTorch, read through devicelayer
    assert t.numpy()[0, 1] == 50.0

    src = torch.arange(10, dtype=torch.int32)
    imported = dl.from_dlpack(src)
    assert "shared with torch" in repr(imported)
    src[2] = -7  # write through PyTorch, read through devicelayer
    assert imported.numpy()[2] == -7
    np.asarray(imported)[3] = 33  # and back
    assert int(src[3]) == 33
    half = dl.from_dlpack(torch.ones(3, dtype=torch.float16))
    assert half.dtype == np.float16 and half.numpy().tolist() == [1, 1, 1]
    bf = torch.arange(4, dtype=torch.bfloat16)
    if pytest.importorskip("ml_dtypes"):
        got = dl.from_dlpack(bf)
        assert str(got.dtype) == "bfloat16" and got.numpy().astype(np.float32).tolist() == [0, 1, 2, 3]
        back = torch.from_dlpack(got)
        assert back.dtype == torch.bfloat16 and torch.equal(back, bf)
        got.free()
    for u in (t, imported, half):
        u.free()


def test_torch_views_are_copied_and_bad_exports_refused():
    torch = pytest.importorskip("torch")
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    with pytest.warns(dl.CopyWarning):
        t = dl.from_dlpack(base.t())
    np.testing.assert_array_equal(t.numpy(), base.t().numpy())
    t.free()
    with pytest.raises(dl.DLPackError, match="gradient"):
        dl.from_dlpack(torch.ones(2, requires_grad=True))


def test_jax_round_trip_on_the_cpu():
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    with jax.default_device(jax.devices("cpu")[0]):  # JAX puts arrays on its GPU where it has one
        t = dl.tensor(np.arange(8, dtype=np.float32), "host")
        j = jnp.from_dlpack(t)
        np.testing.assert_array_equal(np.asarray(j), np.arange(8))
        assert j.unsafe_buffer_pointer() == np.asarray(t).ctypes.data  # zero copy (64-byte alignment)
        np.asarray(t)[0] = 99.0  # a write through devicelayer is seen by JAX
        assert float(j[0]) == 99.0
        a = jax.device_put(jnp.arange(5, dtype=jnp.int32) * 3, jax.devices("cpu")[0])
        back = dl.from_dlpack(a)
        assert np.asarray(back).ctypes.data == a.unsafe_buffer_pointer()
        np.testing.assert_array_equal(back.numpy(), np.arange(5) * 3)
        back.free()
        t.free()


def test_mapped_device_memory_goes_to_the_host_without_a_copy(device):
    t = dl.tensor(np.arange(6, dtype=np.float32), device)
    t.ready.wait()
    address = device.pool.host_address(t.buffer)
    if device.info.backend == "host" or address is None:
        assert device.info.backend == "host" or not getattr(device, "mapped", False)
        t.free()
        pytest.skip("the device's memory is not mapped into the host")
    a = np.from_dlpack(t, device="cpu")  # a unified device's mapped memory: the same bytes, no copy
    assert a.ctypes.data == address
    a[2] = -3.0
    assert t.numpy()[2] == -3.0
    released = t.free()
    assert not released.done  # NumPy still holds the mapped memory
    del a
    assert _settle(released)

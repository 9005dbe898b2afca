"""DLPack on CUDA with CuPy, PyTorch and JAX: zero copy (same device pointer; a write through one side read
through the other), the stream handshake (a producer kernel still running when the memory changes hands is
waited for on the device, in both directions), pinned host memory (kDLCUDAHost), and InferenceSession /
IOBinding fed with GPU tensors.  Skipped where there is no CUDA device or library."""

from __future__ import annotations

import gc
import time

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.dlpack import DLDeviceType

CUDA = [d for d in dl.devices() if d.pool.dlpack_device()[0] == DLDeviceType.kDLCUDA]
pytestmark = pytest.mark.skipif(not CUDA, reason="no CUDA device")
N = 1 << 20
#: clock cycles a producer kernel spins before writing (about 0.1-0.2 s on a current GPU)
SPIN = 200_000_000

SPIN_SOURCE = r"""
extern "C" __global__ void spin_fill(float* x, int n, long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 7.0f;
}
"""


@pytest.fixture
def cuda():
    dev = CUDA[0]
    yield dev
    dev.synchronize()


def _address(t: dl.Tensor) -> int:
    return t.device.pool.dlpack_address(t.buffer)[0]


def _slow_devicelayer_fill(dev) -> dl.Tensor:
    """A tensor that a devicelayer kernel is still writing (7s after a spin) when this returns."""
    t = dl.empty((N,), np.float32, dev)
    prog = dev.compile(SPIN_SOURCE, "spin_fill")
    t.ready = dev.launch(prog, [t.buffer, N, SPIN], N)
    assert not t.ready.done, "the producer kernel finished too soon for the test to mean anything"
    return t


# -- CuPy ------------------------------------------------------------------------------------------------
def test_cupy_zero_copy_both_ways(cuda):
    cupy = pytest.importorskip("cupy")
    x = np.arange(12, dtype=np.float32)
    t = dl.tensor(x, cuda)
    c = cupy.from_dlpack(t)
    assert c.data.ptr == _address(t) and c.device.id == cuda.info.index
    c[3] = -1.0  # write through CuPy, read through devicelayer
    cupy.cuda.get_current_stream().synchronize()
    assert t.numpy()[3] == -1.0

    src = cupy.arange(10, dtype=cupy.int64)
    imported = dl.from_dlpack(src)
    assert imported.device is cuda and _address(imported) == src.data.ptr
    assert "shared with cupy" in repr(imported)
    np.testing.assert_array_equal(imported.numpy(), np.arange(10))
    del src
    gc.collect()
    np.testing.assert_array_equal(imported.numpy(), np.arange(10))  # the Tensor keeps CuPy's memory alive
    imported.free()
    t.free()


def test_cupy_producer_still_running_is_waited_for_on_the_device(cuda):
    cupy = pytest.importorskip("cupy")
    kernel = cupy.RawKernel(SPIN_SOURCE, "spin_fill")
    x = cupy.zeros(N, cupy.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        kernel(((N + 255) // 256,), (256,), (x, np.int32(N), np.int64(SPIN)))
        t = dl.from_dlpack(x)  # CuPy's __dlpack__ makes devicelayer's stream wait for its current stream
        assert not stream.done, "the producer kernel finished too soon for the test to mean anything"
    assert (t.numpy() == 7.0).all()
    t.free()


def test_devicelayer_producer_still_running_is_waited_for_by_cupy(cuda):
    cupy = pytest.importorskip("cupy")
    t = _slow_devicelayer_fill(cuda)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        c = cupy.from_dlpack(t)  # devicelayer makes CuPy's stream wait for the kernel's event
        total = float(c.sum())
    assert total == 7.0 * N
    t.free()


# -- PyTorch ------------------------------------------------------------------------------------------------
def _torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch without CUDA")
    return torch


def test_torch_zero_copy_both_ways(cuda):
    torch = _torch_cuda()
    t = dl.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), cuda)
    tt = torch.from_dlpack(t)
    assert tt.is_cuda and tt.data_ptr() == _address(t) and tt.shape == (2, 3)
    tt[1, 1] = 99.0  # write through PyTorch, read through devicelayer
    torch.cuda.synchronize()
    assert t.numpy()[1, 1] == 99.0

    src = torch.arange(8, device=f"cuda:{cuda.info.index}", dtype=torch.float16)
    imported = dl.from_dlpack(src)
    assert _address(imported) == src.data_ptr() and imported.dtype == np.float16
    np.testing.assert_array_equal(imported.numpy(), np.arange(8))
    bf = torch.arange(4, device=src.device, dtype=torch.bfloat16)
    got = dl.from_dlpack(bf)
    assert str(got.dtype) == "bfloat16" and torch.equal(torch.from_dlpack(got), bf)
    for u in (t, imported, got):
        u.free()


def test_torch_producer_still_running_is_waited_for_on_the_device(cuda):
    torch = _torch_cuda()
    x = torch.zeros(N, device=f"cuda:{cuda.info.index}")
    torch.cuda._sleep(SPIN)  # on PyTorch's current stream, then the write
    x.fill_(7.0)
    t = dl.from_dlpack(x)  # PyTorch's __dlpack__ makes devicelayer's stream wait
    assert (t.numpy() == 7.0).all()
    t.free()


def test_devicelayer_producer_still_running_is_waited_for_by_torch(cuda):
    torch = _torch_cuda()
    t = _slow_devicelayer_fill(cuda)
    for stream in (torch.cuda.current_stream(), torch.cuda.Stream()):  # the legacy default stream, then another
        with torch.cuda.stream(stream):
            tt = torch.from_dlpack(t)
            assert float(tt.sum()) == 7.0 * N
    t.free()


def test_free_waits_for_a_torch_consumer(cuda):
    torch = _torch_cuda()
    t = dl.tensor(np.ones(64, np.float32), cuda)
    tt = torch.from_dlpack(t)
    released = t.free()
    time.sleep(0.05)
    assert not released.done
    del tt
    gc.collect()
    deadline = time.monotonic() + 5
    while not released.done and time.monotonic() < deadline:
        time.sleep(0.01)
    assert released.done


def test_pinned_host_memory_is_host_memory_of_kind_cuda_host(cuda):
    torch = _torch_cuda()
    from test_dlpack import _struct

    pinned = torch.arange(6, dtype=torch.float32).pin_memory()
    assert pinned.__dlpack_device__()[0] == DLDeviceType.kDLCUDAHost
    capsule = pinned.__dlpack__(max_version=(1, 0))
    said = _struct(capsule)[0].dl_tensor.device.device_type  # PyTorch may label the capsule kDLCPU
    assert said in (DLDeviceType.kDLCUDAHost, DLDeviceType.kDLCPU)
    t = dl.from_dlpack(capsule)
    assert t.device.id == "host" and t.__dlpack_device__() == (said, 0)  # the kind is kept for re-export
    assert _address(t) == pinned.data_ptr()
    pinned[2] = 40.0
    assert np.asarray(t)[2] == 40.0
    back = np.from_dlpack(t)  # NumPy takes kDLCUDAHost memory as host memory
    assert back.ctypes.data == pinned.data_ptr()
    on_gpu = t.to(cuda)
    np.testing.assert_array_equal(on_gpu.numpy(), pinned.numpy())
    for u in (t, on_gpu):
        u.free()


# -- JAX ------------------------------------------------------------------------------------------------
def test_jax_round_trip_on_the_gpu(cuda):
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    try:
        gpu = jax.devices("gpu")[cuda.info.index]
    except RuntimeError:
        pytest.skip("JAX without a GPU")
    t = dl.tensor(np.arange(16, dtype=np.float32), cuda)
    j = jnp.from_dlpack(t)
    np.testing.assert_array_equal(np.asarray(j), np.arange(16))
    assert j.unsafe_buffer_pointer() == _address(t)
    a = jax.device_put(jnp.arange(9, dtype=jnp.int32) * 2, gpu)
    imported = dl.from_dlpack(a)
    assert imported.device is cuda and _address(imported) == a.unsafe_buffer_pointer()
    np.testing.assert_array_equal(imported.numpy(), np.arange(9) * 2)
    for u in (t, imported):
        u.free()


# -- placement, copies, misuse -----------------------------------------------------------------------------
def test_gpu_memory_to_the_host_is_a_warned_copy(cuda):
    cupy = pytest.importorskip("cupy")
    c = cupy.arange(5, dtype=cupy.float32)
    with pytest.warns(dl.CopyWarning, match="copied to host"):
        t = dl.from_dlpack(c, device="host")
    np.testing.assert_array_equal(np.asarray(t), np.arange(5))
    with pytest.raises(dl.DLPackError, match="copy=False"):
        dl.from_dlpack(c, device="host", copy=False)
    g = dl.tensor(np.arange(3, dtype=np.float32), cuda)
    np.testing.assert_array_equal(np.from_dlpack(g, device="cpu"), np.arange(3))  # a copy: NumPy asked for the host
    for u in (t, g):
        u.free()


def test_stream_values(cuda):
    t = dl.tensor(np.ones(4, np.float32), cuda)
    with pytest.raises(dl.DLPackError, match="0 is ambiguous"):
        t.__dlpack__(stream=0)
    with pytest.raises(dl.DLPackError, match="stream"):
        t.__dlpack__(stream="default")
    for stream in (None, -1, 1, 2):
        dl.from_dlpack(t.__dlpack__(stream=stream, max_version=(1, 0))).free()
    t.free()


def test_session_with_gpu_tensors_matches_onnxruntime(cuda):
    torch = _torch_cuda()
    ort = pytest.importorskip("onnxruntime")
    import devicelayer.onnx as dlort
    from devicelayer.onnx.testing import scaled_error

    path = dlort.bundled("tiny_cnn")
    x = np.random.default_rng(0).standard_normal((4, 3, 32, 32)).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    sess = dlort.InferenceSession(path, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert sess.get_providers() == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert sess.plan.devices[0] is cuda
    assert scaled_error(sess.run(None, {"x": x})[0], want) < 1e-4
    gx = torch.from_numpy(x).to(f"cuda:{cuda.info.index}")
    assert scaled_error(sess.run(None, {"x": gx})[0], want) < 1e-4  # a GPU tensor in input_feed

    y = torch.empty(4, 10, device=gx.device)
    binding = sess.io_binding()
    binding.bind_input("x", gx)
    binding.bind_output("probs", y)
    for _ in range(3):
        sess.run_with_iobinding(binding)
        assert scaled_error(y.cpu().numpy(), want) < 1e-4
    binding.bind_input(name="x", device_type="cuda", device_id=cuda.info.index, element_type=np.float32,
                       shape=tuple(gx.shape), buffer_ptr=gx.data_ptr())  # onnxruntime's raw-pointer form
    binding.bind_output("probs", "cuda", cuda.info.index)
    sess.run_with_iobinding(binding)
    out = binding.get_outputs()[0]
    assert out.device is cuda and scaled_error(torch.from_dlpack(out).cpu().numpy(), want) < 1e-4
    binding.clear_binding_inputs()
    binding.clear_binding_outputs()

"""Vulkan-specific behaviour: sub-allocation, push-constant limits, SPIR-V input, pipeline cache, specialization,
aligned views, the staging path, and the backend's failure modes.  Skipped only when no Vulkan device is present."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import devicelayer as dl
from kernels import INCREMENT

VULKAN = [d for d in dl.devices() if d.info.backend == "vulkan"]
pytestmark = pytest.mark.skipif(not VULKAN, reason="no Vulkan device present")
ROOT = Path(__file__).resolve().parent.parent

FIXED16 = """
#version 450
layout(local_size_x = 16) in;
layout(std430, binding = 0) buffer V { int v[]; };
layout(push_constant) uniform P { int n; } p;
void main() { uint i = gl_GlobalInvocationID.x; if (i < uint(p.n)) v[i] = int(gl_LocalInvocationID.x); }
"""

LOCAL_ID = """
#version 450
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) buffer V { int v[]; };
layout(push_constant) uniform P { int n; } p;
void main() { uint i = gl_GlobalInvocationID.x; if (i < uint(p.n)) v[i] = int(gl_WorkGroupSize.x); }
"""


@pytest.fixture(params=[d.id for d in VULKAN] or ["none"])
def vdev(request):
    dev = dl.device(request.param)
    yield dev
    dev.synchronize()


def roundtrip(dev, data):
    buf = dev.pool.allocate(data.nbytes, data.dtype)
    dev.pool.upload(buf, data)
    out = np.empty_like(data)
    dev.pool.download(buf, out).wait(30)
    return buf, out


def private_device(dev, **kw):
    """A second VulkanDevice on the same physical device (closed by the test), e.g. forced into staging mode."""
    from devicelayer.backends.vulkan.backend import VulkanDevice
    return VulkanDevice(dev.phys, dev.instance, **kw)


def test_many_allocations_share_few_memory_blocks(vdev):
    before = vdev.stats["blocks_allocated"]
    bufs = [vdev.pool.allocate(4096 + 13 * i) for i in range(300)]
    blocks = {b.handle.block.id for b in bufs}
    assert len(blocks) <= 2 and vdev.stats["blocks_allocated"] - before <= 2
    offsets = sorted((b.handle.block.id, b.handle.offset, b.handle.size) for b in bufs)
    for (b1, o1, s1), (b2, o2, _) in zip(offsets, offsets[1:]):
        assert b1 != b2 or o1 + s1 <= o2  # no overlap
    assert all(b.handle.offset % vdev.info.view_alignment == 0 for b in bufs)
    for b in bufs:
        vdev.pool.free(b)
    vdev.synchronize()


def test_large_allocation_gets_a_dedicated_block(vdev, rng):
    n = vdev.info.max_allocation
    buf = vdev.pool.allocate(n)
    assert buf.handle.block.dedicated and buf.handle.block.size >= n
    tail = rng.integers(0, 255, 1 << 20, dtype=np.uint8)
    view = buf.view(n - tail.nbytes, tail.nbytes)
    vdev.pool.upload(view, tail)
    out = np.empty_like(tail)
    vdev.pool.download(view, out).wait(60)
    np.testing.assert_array_equal(out, tail)
    held = vdev.heap.allocated
    vdev.pool.free(buf).wait(60)
    assert vdev.heap.allocated <= held - n  # the dedicated block went back to the driver


def test_out_of_memory_leaves_the_device_usable(vdev):
    bufs = []
    with pytest.raises(dl.OutOfMemory):
        for _ in range(vdev.info.memory_total // vdev.info.max_allocation + 2):
            bufs.append(vdev.pool.allocate(vdev.info.max_allocation))
    for b in bufs:
        vdev.pool.free(b)
    vdev.synchronize()
    _, out = roundtrip(vdev, np.arange(100, dtype=np.int32))
    np.testing.assert_array_equal(out, np.arange(100))


def test_push_constants_over_the_limit_are_refused(vdev):
    limit = vdev.info.extras["maxPushConstantsSize"]
    members = " ".join(f"float m{i};" for i in range(limit // 4 + 1))
    src = f"""#version 450
layout(local_size_x = 1) in;
layout(std430, binding = 0) buffer V {{ float v[]; }};
layout(push_constant) uniform P {{ {members} }} p;
void main() {{ v[0] = p.m0 + p.m{limit // 4}; }}
"""
    with pytest.raises(dl.InvalidArgument, match="maxPushConstantsSize"):
        vdev.compile(src, "too_many")
    ok = src.replace(f" float m{limit // 4};", "").replace(f"p.m{limit // 4}", "p.m1")
    prog = vdev.compile(ok, "just_fits")
    assert len(prog.signature) == 1 + limit // 4


def test_spirv_bytes_are_accepted(vdev):
    from devicelayer.backends.vulkan.spirv import compile_glsl
    spirv = compile_glsl(INCREMENT["glsl"])
    assert spirv[:4] == b"\x03\x02\x23\x07"
    prog = vdev.compile(spirv, "increment")
    assert [a.kind for a in prog.signature] == ["buffer", "scalar"]
    assert prog.signature[0].dtype == np.int32 and prog.signature[1].dtype == np.int32
    buf, _ = roundtrip(vdev, np.arange(50, dtype=np.int32))
    vdev.launch(prog, [buf, 50], 50).wait(30)
    out = np.empty(50, np.int32)
    vdev.pool.download(buf, out).wait(30)
    np.testing.assert_array_equal(out, np.arange(50) + 1)
    vdev.pool.free(buf)
    with pytest.raises((dl.InvalidArgument, dl.CompileError)):
        vdev.compile(spirv[:40] + b"\0" * 8, "truncated")


def test_signature_is_reflected_from_spirv(vdev):
    src = """#version 450
#extension GL_EXT_shader_explicit_arithmetic_types : require
layout(local_size_x = 1) in;
layout(std430, binding = 1) readonly buffer B { double b[]; };
layout(std430, binding = 0) buffer A { uint a[]; };
layout(push_constant) uniform P { float x; int64_t y; uint z; } p;
void main() { a[0] = uint(b[0]) + uint(p.x) + uint(p.y) + p.z; }
"""
    if not {"float64", "int64"} <= vdev.info.dtypes:
        pytest.skip("needs float64 and int64")
    sig = vdev.compile(src, "reflect").signature
    assert [(a.kind, a.dtype) for a in sig] == [("buffer", np.uint32), ("buffer", np.float64),
                                                 ("scalar", np.float32), ("scalar", np.int64),
                                                 ("scalar", np.uint32)]
    assert [a.name for a in sig][2:] == ["x", "y", "z"]


def test_pipeline_cache_file_is_written(vdev, tmp_path):
    dev = private_device(vdev, pipeline_cache_dir=tmp_path)
    try:
        prog = dev.compile(INCREMENT["glsl"], "increment")
        buf, _ = roundtrip(dev, np.zeros(64, np.int32))
        dev.launch(prog, [buf, 64], 64).wait(30)
    finally:
        dev.close()
    files = list(tmp_path.glob("pipelines-*.bin"))
    assert len(files) == 1 and files[0].stat().st_size >= 32
    again = private_device(vdev, pipeline_cache_dir=tmp_path)
    try:
        assert again.pipeline_cache_loaded == files[0].stat().st_size
    finally:
        again.close()


def test_explicit_local_size_through_specialization(vdev):
    prog = vdev.compile(LOCAL_ID, "local_id")
    n = 512
    buf = vdev.pool.allocate(n * 4, np.int32)
    out = np.empty(n, np.int32)
    for local in (None, 32, 128, 256):
        vdev.launch(prog, [buf, n], n, local)
        vdev.pool.download(buf, out).wait(30)
        assert (out == (local or 64)).all()
    assert {(32, 1, 1), (64, 1, 1), (128, 1, 1), (256, 1, 1)} <= set(prog.handle.pipelines)
    vdev.pool.free(buf)


def test_fixed_local_size_is_kept_and_a_different_one_refused(vdev):
    prog = vdev.compile(FIXED16, "fixed16")
    n = 100
    buf = vdev.pool.allocate(n * 4, np.int32)
    vdev.launch(prog, [buf, n], n)
    out = np.empty(n, np.int32)
    vdev.pool.download(buf, out).wait(30)
    np.testing.assert_array_equal(out, np.arange(n) % 16)
    vdev.launch(prog, [buf, n], 112, 16).wait(30)
    with pytest.raises(dl.InvalidArgument, match="fixed local size"):
        vdev.launch(prog, [buf, n], 128, 32)
    vdev.pool.free(buf)


def test_too_many_work_groups_refused(vdev):
    """One more work-group than the device takes along a dimension whose items still fit 32-bit indices (NVIDIA
    takes 2**31 - 1 groups along x: there the item count is refused first, so y is tried)."""
    prog = vdev.compile(FIXED16, "fixed16")
    buf = vdev.pool.allocate(64, np.int32)
    dims = [d for d in range(3) if (vdev.info.max_work_groups[d] + 1) * (16 if d == 0 else 1) < 2 ** 31 - 1]
    if not dims:
        pytest.skip("every dimension's group limit is past 32-bit item indices")
    d = dims[0]
    size = [16, 1, 1]
    size[d] = (vdev.info.max_work_groups[d] + 1) * (16 if d == 0 else 1)
    with pytest.raises(dl.InvalidArgument, match="work-groups, more than the device"):
        vdev.launch(prog, [buf, 16], tuple(size), (16, 1, 1))
    vdev.launch(prog, [buf, 16], 16).wait(30)  # (the device still launches)
    out = np.empty(16, np.int32)
    vdev.pool.download(buf, out).wait(30)
    assert np.array_equal(out, np.arange(16))
    vdev.pool.free(buf)


def test_views_at_the_offset_alignment_as_kernel_args(vdev):
    align = vdev.info.view_alignment
    assert align == vdev.phys.limits["minStorageBufferOffsetAlignment"]
    prog = vdev.compile(INCREMENT["glsl"], "increment")
    per = align // 4 or 1
    total = 8 * per + 16
    buf, _ = roundtrip(vdev, np.zeros(total, np.int32))
    expect = np.zeros(total, np.int32)
    for k in range(1, 7):
        view = buf.view(k * align, 8)
        vdev.launch(prog, [view, 2], 2)
        expect[k * per:k * per + 2] += 1
    out = np.empty(total, np.int32)
    vdev.pool.download(buf, out).wait(30)
    np.testing.assert_array_equal(out, expect)
    if align > 4:
        with pytest.raises(dl.InvalidArgument, match="alignment"):
            vdev.launch(prog, [buf.view(4, 8), 2], 2)
    vdev.pool.free(buf)


def test_descriptor_sets_and_command_buffers_are_reused(vdev):
    prog = vdev.compile(INCREMENT["glsl"], "increment")
    buf, _ = roundtrip(vdev, np.zeros(32, np.int32))
    vdev.launch(prog, [buf, 32], 32).wait(30)
    recorded = vdev.stats["recorded"]
    for _ in range(50):
        vdev.launch(prog, [buf, 32], 32)
    vdev.synchronize()
    assert vdev.stats["recorded"] == recorded
    out = np.empty(32, np.int32)
    vdev.pool.download(buf, out).wait(30)
    assert (out == 51).all()
    vdev.pool.free(buf)


def test_staging_path(vdev, rng, monkeypatch):
    """A device whose buffers are not host-visible: chunked copies through the staging block."""
    from devicelayer.backends.vulkan import backend as vkb
    monkeypatch.setattr(vkb, "STAGING_CHUNK", 4096)
    dev = private_device(vdev, force_staging=True)
    try:
        assert not dev.mapped and dev.staging is not None
        data = rng.integers(0, 1000, 4096 * 3 // 4 + 77, dtype=np.int32)
        buf, out = roundtrip(dev, data)
        np.testing.assert_array_equal(out, data)
        prog = dev.compile(INCREMENT["glsl"], "increment")
        ev = dev.launch(prog, [buf, data.size], data.size)
        other = dev.pool.allocate(buf.nbytes, np.int32)
        dev.pool.copy(other, buf, wait=[ev])
        dev.pool.download(other, out).wait(30)
        np.testing.assert_array_equal(out, data + 1)
    finally:
        dev.close()


def test_host_steps_do_not_block_the_caller(vdev):
    gate = dl.UserEvent()
    buf = vdev.pool.allocate(1 << 20, np.uint8)
    first = vdev.pool.upload(buf, np.ones(1 << 20, np.uint8), wait=[gate])
    out = np.zeros(1 << 20, np.uint8)
    down = vdev.pool.download(buf, out)
    assert not first.done and not down.done
    gate.set()
    down.wait(30)
    assert out.all()
    vdev.pool.free(buf)


def test_info_comes_from_the_device(vdev):
    i, lim = vdev.info, vdev.phys.limits
    assert i.kernel_language == "glsl"
    assert i.max_work_group_size == lim["maxComputeWorkGroupInvocations"]
    assert i.max_work_item_sizes == tuple(lim["maxComputeWorkGroupSize"])
    assert i.local_memory == lim["maxComputeSharedMemorySize"]
    assert i.max_allocation <= lim["maxStorageBufferRange"]
    assert len(i.extras["deviceUUID"]) == 32 and i.extras["apiVersion"]
    assert 0 < vdev.pool.free_bytes <= vdev.pool.total_bytes


def _python(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env={**os.environ, **env}, cwd=ROOT, timeout=120)


def test_missing_loader_is_reported_not_raised(tmp_path):
    (tmp_path / "vulkan.py").write_text("raise OSError('cannot load library libvulkan.so.1')\n")
    out = _python("""
        import devicelayer as dl
        print([d.id for d in dl.devices()])
        print([u.reason for u in dl.unavailable() if u.backend == 'vulkan'])
        """, {"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
              "DEVICELAYER_BACKENDS": "host,vulkan"})
    assert out.returncode == 0, out.stderr
    assert "host" in out.stdout and "loader" in out.stdout and "libvulkan" in out.stdout


def test_no_driver_is_reported_not_raised():
    out = _python("""
        import devicelayer as dl
        print([d.id for d in dl.devices()])
        print([u.reason for u in dl.unavailable() if u.backend == 'vulkan'])
        """, {"VK_ICD_FILENAMES": "/nonexistent.json", "VK_DRIVER_FILES": "/nonexistent.json",
              "DEVICELAYER_BACKENDS": "host,vulkan"})
    assert out.returncode == 0, out.stderr
    assert "host" in out.stdout and "vulkan:" not in out.stdout.splitlines()[0]
    assert "Vulkan" in out.stdout.splitlines()[1]


def test_host_arrays_transfer_by_one_gpu_copy(vdev, rng):
    """On a staging device, host_array memory is host-visible Vulkan memory: transfers skip the memcpy."""
    dev = private_device(vdev, force_staging=True)
    try:
        n = 10_001
        host = dev.pool.host_array(n, np.float32)
        assert host.shape == (n,) and host.dtype == np.float32
        host[:] = rng.standard_normal(n).astype(np.float32)
        want = host.copy()
        buf = dev.pool.allocate(4 * n, np.float32)
        host_steps = []
        step = dev._host_step
        dev._host_step = lambda fn, label: host_steps.append(label) or step(fn, label)
        dev.pool.upload(buf, host).wait(30)
        host[:] = np.nan  # poisoned: the download must write every element
        dev.pool.download(buf, host).wait(30)
        np.testing.assert_array_equal(host, want)
        assert host_steps == []  # no memcpy through the staging block: one GPU copy each way
        part = dev.pool.host_array((3, 7), np.int32)  # a second array, and a view into the middle of one
        part[:] = np.arange(21, dtype=np.int32).reshape(3, 7)
        small = dev.pool.allocate(4 * 7, np.int32)
        dev.pool.upload(small, part[1]).wait(30)
        got = np.empty(7, np.int32)
        dev.pool.download(small, got).wait(30)  # an ordinary array still goes through the staging block
        np.testing.assert_array_equal(got, np.arange(7, 14))
        assert len(host_steps) == 1  # the ordinary array's download copied out of the staging block
        ranges = len(dev._host_ranges)
        del host, part
        import gc

        from devicelayer import reclaim
        gc.collect()
        assert reclaim.drain(30)
        assert len(dev._host_ranges) == ranges - 2  # freed with their last view (on the reclaim thread)
        for b in (buf, small):
            dev.pool.free(b)
    finally:
        dev.close()


def test_looking_for_libshaderc_starts_no_process(monkeypatch):
    """A libshaderc the loader cannot open is not searched for again with ldconfig, gcc and ld (cffi's fallback
    for a name it cannot open: three process starts a name, in every process that compiles GLSL)."""
    pytest.importorskip("cffi")
    from devicelayer.backends.vulkan import spirv

    started = []
    real = subprocess.Popen.__init__

    def counted(self, args, *rest, **kwargs):
        started.append(args)
        return real(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", counted)
    monkeypatch.setattr(spirv, "_shaderc", None)
    monkeypatch.setattr(spirv, "shaderc_unavailable_reason", None)
    found = spirv._load_shaderc()
    assert started == []
    assert found is not None or "libshaderc" in spirv.shaderc_unavailable_reason


def test_a_wait_that_polls_first_gives_the_same_results_and_timeouts(vdev, rng):
    """GPUs poll the timeline for ``wait_poll_s`` before blocking (NVIDIA's blocking wait returned ~10 ms late in
    many runs); CPU devices block at once.  Forced on here: results, a zero timeout and a gated event behave as
    with the blocking wait."""
    from devicelayer.backends.vulkan.backend import WAIT_POLL_S

    assert vdev.wait_poll_s == (0.0 if vdev.info.device_type == "cpu" else WAIT_POLL_S)
    saved = vdev.wait_poll_s
    vdev.wait_poll_s = 0.002
    try:
        for _ in range(20):
            data = rng.standard_normal(4096).astype(np.float32)
            buf, out = roundtrip(vdev, data)
            assert np.array_equal(out, data)
            vdev.pool.free(buf)
        gate = dl.UserEvent()
        buf = vdev.pool.allocate(1 << 16, np.uint8)
        up = vdev.pool.upload(buf, np.ones(1 << 16, np.uint8), wait=[gate])
        with pytest.raises(dl.EventTimeout):
            up.wait(0)
        with pytest.raises(dl.EventTimeout):
            up.wait(0.01)
        gate.set()
        up.wait(30)
        assert up.done
        vdev.pool.free(buf)
        assert vdev.wait_value(vdev.completed() + 10 ** 6, 0.005) is False  # (a value no submission reaches)
        assert vdev.wait_value(vdev.completed(), 0.0) is True
    finally:
        vdev.wait_poll_s = saved

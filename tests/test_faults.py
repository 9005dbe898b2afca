"""Faults: backends that fail to start, a kernel failing mid-graph, work that never completes, and disk caches
that are corrupted or written by several processes at once.  The device tests run on every device present.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.kernels.op import OPS, register
from devicelayer.memory import settle
from kernels import INCREMENT, SPIN, source

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent


# -- 1. a backend whose driver fails at start ----------------------------------------------------------------------
BROKEN_PLUGIN = '''
import devicelayer as dl


class StartFails(dl.Backend):
    name = "startfails"

    def __init__(self):
        raise RuntimeError("driver exploded at start: device 0 lost")


class NoDriver(dl.Backend):
    name = "nodriver"

    def __init__(self):
        raise dl.BackendUnavailable("libfakegpu.so.1 not found: the fakegpu driver is not installed")


class ListFails(dl.Backend):
    name = "listfails"

    def devices(self):
        raise RuntimeError("enumerating devices crashed")
'''

#: run in a fresh process: use every device that started, then ``devicelayer info`` (table and JSON)
USE_EVERY_DEVICE = f'''
import contextlib, io, json, sys
import numpy as np
import devicelayer as dl
from devicelayer.cli import main
sys.path.insert(0, {str(TESTS)!r})
from kernels import INCREMENT, SPIN, source

report = {{"devices": {{}}, "unavailable": {{u.backend: u.reason for u in dl.unavailable()}}}}
for dev in dl.devices():
    prog = dev.compile(source(INCREMENT, dev), "increment")
    buf = dev.pool.allocate(256, np.int32)
    dev.pool.upload(buf, np.arange(64, dtype=np.int32))
    dev.launch(prog, [buf, 64], 64)
    out = np.empty(64, np.int32)
    dev.pool.download(buf, out).wait(60)
    report["devices"][dev.id] = bool((out == np.arange(1, 65)).all())
for args in (["info"], ["info", "--json"]):
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        report[" ".join(args) + " rc"] = main(args)
    report[" ".join(args)] = text.getvalue()
print("REPORT " + json.dumps(report))
'''


def _run_with_plugin(tmp_path: Path, env: dict[str, str]) -> dict:
    """Install the broken plugin through its entry points and run USE_EVERY_DEVICE; its report."""
    site = tmp_path / "site"
    dist = site / "brokendrivers-1.0.dist-info"
    dist.mkdir(parents=True)
    (site / "brokendrivers.py").write_text(BROKEN_PLUGIN)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: brokendrivers\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[devicelayer.backends]\nstartfails = brokendrivers:StartFails\n"
                                           "nodriver = brokendrivers:NoDriver\nlistfails = brokendrivers:ListFails\n")
    return _use_every_device({"PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", **env})


def _use_every_device(env: dict[str, str]) -> dict:
    """Run USE_EVERY_DEVICE in a fresh process with ``env`` added; its report."""
    out = subprocess.run([sys.executable, "-c", USE_EVERY_DEVICE], capture_output=True, text=True,
                         env={**os.environ, **env}, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("REPORT ")][-1]
    return json.loads(line[len("REPORT "):])


BROKEN_REASONS = {"startfails": "driver exploded at start", "nodriver": "libfakegpu.so.1 not found",
                  "listfails": "enumerating devices crashed"}


def _check_broken_reported(report: dict, names) -> None:
    info = json.loads(report["info --json"])
    listed = {u["backend"]: u["reason"] for u in info["unavailable"]}
    for name in names:
        assert BROKEN_REASONS[name] in report["unavailable"][name]
        assert BROKEN_REASONS[name] in listed[name]
        assert name in report["info"]
    assert report["info rc"] == 0 and report["info --json rc"] == 0
    assert [d["id"] for d in info["devices"]] == list(report["devices"])


@pytest.mark.timeout(300)
def test_plugins_whose_driver_fails_leave_every_other_device_working(tmp_path):
    report = _run_with_plugin(tmp_path, {})
    assert report["devices"] == {d.id: True for d in dl.devices()}
    _check_broken_reported(report, BROKEN_REASONS)


@pytest.mark.timeout(300)
def test_environment_order_with_failing_backends_and_an_opencl_loader_without_drivers(tmp_path):
    """DEVICELAYER_BACKENDS names broken backends first; the OpenCL ICD loader is pointed at an empty vendor folder."""
    present = list(dict.fromkeys(d.info.backend for d in dl.devices()))
    (tmp_path / "no-vendors").mkdir()
    names = ["startfails", *[b for b in present if b != "host"], "nodriver", "host"]
    report = _run_with_plugin(tmp_path, {"DEVICELAYER_BACKENDS": ",".join(names),
                                         "OCL_ICD_VENDORS": str(tmp_path / "no-vendors")})
    expected = [d.id for b in names for d in dl.devices() if d.info.backend == b and b != "opencl"]
    assert list(report["devices"]) == expected and all(report["devices"].values())
    _check_broken_reported(report, ["startfails", "nodriver"])
    if "opencl" in present:
        assert "no OpenCL platform" in report["unavailable"]["opencl"]


# -- 2. a kernel failing mid-graph ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def armed_op():
    """test_graph's op whose host kernel raises while ``armed`` (else doubles its input), registered meanwhile."""
    from test_graph import _Fails

    mine = _Fails.name not in OPS
    if mine:
        register(_Fails)
    yield _Fails
    _Fails.armed = True
    if mine:
        OPS.pop(_Fails.name, None)


def _live(devices) -> list[int]:
    return [d.pool.live_buffers for d in devices]


@pytest.mark.timeout(60)
def test_kernel_failing_mid_graph_names_its_op_and_the_plan_runs_again(device, armed_op):
    """n1, n2 on the device; ``bad`` (a host kernel) in the middle; n4, n5 on the device again."""
    g = dl.Graph()
    x = g.input("x", (300,))
    y = g.exp(g.relu(x, name="n1"), name="n2")
    y = g.apply(armed_op.name, [y], name="bad")[0]
    g.output("y", g.tanh(g.sigmoid(y, name="n4"), name="n5"))
    where = {"n1": device.id, "n2": device.id, "bad": "host", "n4": device.id, "n5": device.id}
    plan = g.compile([device.id, "host"], placement=where)
    devices = [device, dl.device("host")]
    xv = np.linspace(-2, 2, 300).astype(np.float32)
    want = np.tanh(1 / (1 + np.exp(-2 * np.exp(np.maximum(xv.astype(np.float64), 0)))))
    live = None
    for _ in range(3):
        armed_op.armed = True
        t0 = time.perf_counter()
        with pytest.raises(dl.GraphError, match=rf"node 'bad' \({armed_op.name}\)") as info:
            plan(x=xv)
        assert "armed op exploded" in str(info.value) and time.perf_counter() - t0 < 30
        armed_op.armed = False
        np.testing.assert_allclose(plan(x=xv)["y"], want, rtol=1e-5, atol=1e-6)
        assert settle()  # what the failed run and earlier tests dropped is released before counting
        live = live or _live(devices)
        assert _live(devices) == live  # failed runs leave no buffers behind
    plan.release()


def _gated_plan(device):
    """``y = sigmoid(relu(x) + z)``, with ``z`` read only by the middle node."""
    g = dl.Graph()
    x, z = g.input("x", (64,)), g.input("z", (64,))
    g.output("y", g.sigmoid(g.add(g.relu(x, name="first"), z, name="joins_z"), name="last"))
    return g.compile([device], fuse=False)  # node by node: the failure names the one node reading z


def _run_with_z_failing_later(plan, device, zbuf):
    """Run with ``z`` a device Tensor whose ready event fails 0.2 s after the run began waiting."""
    gate = dl.UserEvent("z upload")
    timer = threading.Timer(0.2, lambda: gate.fail("z never arrived"))
    timer.start()
    try:
        with pytest.raises(dl.GraphError) as info:
            plan(x=np.ones(64, np.float32), z=dl.Tensor(zbuf, (64,), np.float32, gate))
    finally:
        timer.join()
    return info.value


@pytest.mark.timeout(60)
def test_input_failing_mid_run_fails_the_run_fast_and_the_plan_recovers(device):
    plan = _gated_plan(device)
    zv = np.linspace(-1, 1, 64).astype(np.float32)
    zbuf = device.pool.allocate(zv.nbytes, np.float32)
    device.pool.upload(zbuf, zv).wait(30)
    want = 1 / (1 + np.exp(-(1 + zv.astype(np.float64))))
    np.testing.assert_allclose(plan(x=np.ones(64, np.float32), z=dl.Tensor(zbuf, (64,), np.float32))["y"], want,
                               rtol=1e-5)
    assert settle()  # earlier tests' dropped buffers released now, not while this one counts
    live = device.pool.live_buffers
    for _ in range(2):
        t0 = time.perf_counter()
        err = _run_with_z_failing_later(plan, device, zbuf)
        assert time.perf_counter() - t0 < 20
        chain, cause = [str(err)], err.__cause__
        while cause is not None:
            chain.append(str(cause))
            cause = cause.__cause__
        assert any("z never arrived" in c for c in chain), chain
        assert device.pool.live_buffers == live
    np.testing.assert_allclose(plan(x=np.ones(64, np.float32), z=dl.Tensor(zbuf, (64,), np.float32))["y"], want,
                               rtol=1e-5)
    plan.release()
    device.pool.free(zbuf)


@pytest.mark.timeout(60)
def test_input_failing_mid_run_names_the_node_that_reads_it(device):
    plan = _gated_plan(device)
    zbuf = device.pool.allocate(256, np.float32)
    try:
        err = _run_with_z_failing_later(plan, device, zbuf)
        assert "node 'joins_z' (add)" in str(err), str(err)
    finally:
        plan.release()
        device.pool.free(zbuf)


# -- 3. work that never completes ----------------------------------------------------------------------------------
def _timed_out(event: dl.Event, timeout: float) -> str:
    t0 = time.perf_counter()
    with pytest.raises(dl.EventTimeout) as info:
        event.wait(timeout=timeout)
    took = time.perf_counter() - t0
    assert timeout * 0.9 <= took < timeout + 5, took
    assert isinstance(info.value, dl.EventError) and isinstance(info.value, TimeoutError)
    assert event.label in str(info.value) and f"{timeout} s" in str(info.value)
    assert not event.done
    return str(info.value)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("outcome", ["set", "fail"])
def test_work_gated_on_an_event_never_completed_times_out_then_the_device_works(device, outcome):
    pool = device.pool
    prog = device.compile(source(INCREMENT, device), "increment")
    gate = dl.UserEvent("gate the host never opens")
    assert settle()
    live = pool.live_buffers
    buf = pool.allocate(256, np.int32)
    other = pool.allocate(256, np.int32)
    out, seen = np.empty(64, np.int32), np.empty(64, np.int32)
    try:
        up = pool.upload(buf, np.arange(64, dtype=np.int32), wait=[gate])
        run = device.launch(prog, [buf, 64], 64, wait=[up])
        down = pool.download(buf, out, wait=[run])
        freed = pool.free(buf)  # freeing never blocks; the memory waits for the gated work
        later = pool.upload(other, np.full(64, 7, np.int32))  # independent, but queued behind in device order
        _timed_out(up, 0.3)
        _timed_out(run, 0.1)
        _timed_out(down, 0)
        _timed_out(later, 0.1)
        _timed_out(freed, 0.05)
        assert pool.live_buffers == live + 2
    finally:
        gate.set() if outcome == "set" else gate.fail("the host condition failed")
    for ev in (later, freed):
        ev.wait(30)
    if outcome == "set":
        for ev in (up, run, down):
            ev.wait(30)
        assert (out == np.arange(1, 65)).all()
    else:
        for ev in (up, run, down):
            with pytest.raises(dl.EventError, match="the host condition failed"):
                ev.wait(30)
    pool.download(other, seen).wait(30)
    assert (seen == 7).all()
    # the device is fully usable afterwards
    device.launch(prog, [other, 64], 64)
    pool.download(other, seen).wait(30)
    assert (seen == 8).all()
    pool.free(other).wait(30)
    assert pool.live_buffers == live


# -- 4. disk caches: corrupted, and written by several processes at once -------------------------------------------
# Vulkan keeps two: SPIR-V compiled from GLSL (backends/vulkan/spirv.py) and the driver's VkPipelineCache
# (backends/vulkan/backend.py), both under DEVICELAYER_CACHE.  The OpenCL backend keeps none: every process builds from
# source (the driver may keep its own, e.g. PoCL's kcache).  CUDA uses CuPy's cache ($CUPY_CACHE_DIR).
GLSL_KERNELS = [INCREMENT["glsl"], INCREMENT["glsl"].replace("v[i] += 1", "v[i] += 2"),
                INCREMENT["glsl"].replace("v[i] += 1", "v[i] *= 3")]


def _spirv():
    from devicelayer.backends.vulkan import spirv as vulkan_spirv

    if not vulkan_spirv.compiler_version():
        pytest.skip("no GLSL compiler (libshaderc or glslc)")
    return vulkan_spirv


def _corrupt(data: bytes, kind: str, other: bytes = b"") -> bytes:
    """``data`` damaged the way ``kind`` says."""
    rng = np.random.default_rng(len(data))
    if kind == "truncated":
        return data[:len(data) // 2]
    if kind == "random":
        return rng.integers(0, 256, len(data), dtype=np.uint8).tobytes()
    if kind == "empty":
        return b""
    if kind == "flipped":  # one byte of the payload changed, header intact
        flipped = bytearray(data)
        flipped[-5] ^= 0x5A
        return bytes(flipped)
    if kind == "another kernel":
        return other
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["truncated", "random", "empty", "flipped", "raw spir-v", "another kernel"])
def test_corrupted_spirv_cache_is_detected_and_rewritten(tmp_path, monkeypatch, kind):
    vs = _spirv()
    monkeypatch.setenv("DEVICELAYER_CACHE", str(tmp_path))
    want = vs.compile_glsl(GLSL_KERNELS[0])
    (path,) = (tmp_path / "spirv").iterdir()
    good = path.read_bytes()
    other = vs.compile_glsl(GLSL_KERNELS[1])
    other_file = next(p for p in (tmp_path / "spirv").iterdir() if p != path).read_bytes()
    assert other != want
    path.write_bytes(want if kind == "raw spir-v" else _corrupt(good, kind, other_file))
    assert vs.compile_glsl(GLSL_KERNELS[0]) == want
    assert path.read_bytes() == good  # written again, whole
    assert sorted(p.name for p in (tmp_path / "spirv").iterdir() if p.suffix != ".spv") == []


@pytest.fixture
def vulkan_device():
    """The first Vulkan device; the test is skipped where there is none."""
    found = [d for d in dl.devices() if d.info.backend == "vulkan"]
    if not found:
        pytest.skip("no Vulkan device present")
    yield found[0]
    found[0].synchronize()


def _increment_on(dev, src: str, n: int = 64) -> np.ndarray:
    prog = dev.compile(src, "increment")
    buf = dev.pool.allocate(4 * n, np.int32)
    dev.pool.upload(buf, np.arange(n, dtype=np.int32))
    dev.launch(prog, [buf, n], n)
    out = np.empty(n, np.int32)
    dev.pool.download(buf, out).wait(60)
    dev.pool.free(buf)
    return out


@pytest.mark.timeout(120)
def test_vulkan_compiles_through_a_corrupted_spirv_cache(vulkan_device, tmp_path, monkeypatch):
    vs = _spirv()
    for kind in ["truncated", "random", "flipped"]:
        monkeypatch.setenv("DEVICELAYER_CACHE", str(tmp_path / kind))
        src = GLSL_KERNELS[0] + f"// {kind}\n"  # new to the device's in-memory program cache
        vs.compile_glsl(src)
        (path,) = (tmp_path / kind / "spirv").iterdir()
        path.write_bytes(_corrupt(path.read_bytes(), kind))
        assert (_increment_on(vulkan_device, src) == np.arange(1, 65)).all()
        assert vs._cache_read(path, path.stem) is not None


def _private_vulkan(dev, folder: Path):
    """A second VulkanDevice on the same physical device, with its pipeline cache file in ``folder``."""
    from devicelayer.backends.vulkan.backend import VulkanDevice

    return VulkanDevice(dev.phys, dev.instance, pipeline_cache_dir=folder)


def _pipeline_cache_run(dev, folder: Path) -> int:
    """Open a private device on ``folder``, run a kernel, save its pipeline cache; the bytes it had loaded."""
    private = _private_vulkan(dev, folder)
    try:
        assert (_increment_on(private, INCREMENT["glsl"]) == np.arange(1, 65)).all()
        private.save_pipeline_cache()
        return private.pipeline_cache_loaded
    finally:
        private.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["truncated", "random", "empty", "wrong vendor"])
def test_corrupted_pipeline_cache_is_detected_and_rewritten(vulkan_device, tmp_path, kind):
    _pipeline_cache_run(vulkan_device, tmp_path)
    (path,) = tmp_path.glob("pipelines-*.bin")
    good = path.read_bytes()
    if kind == "wrong vendor":  # a well-formed header of another driver
        bad = good[:8] + struct.pack("<I", struct.unpack_from("<I", good, 8)[0] ^ 0xFFFF) + good[12:]
    else:
        bad = _corrupt(good, kind)
    path.write_bytes(bad)
    assert _pipeline_cache_run(vulkan_device, tmp_path) == 0  # refused, and the kernel still ran
    assert path.read_bytes()[:32] == good[:32]  # rewritten with this driver's header
    size = path.stat().st_size
    assert _pipeline_cache_run(vulkan_device, tmp_path) == size  # and loaded whole next time


@pytest.mark.timeout(120)
def test_pipeline_cache_with_a_damaged_body_is_not_given_to_the_driver(vulkan_device, tmp_path):
    _pipeline_cache_run(vulkan_device, tmp_path)
    (path,) = tmp_path.glob("pipelines-*.bin")
    good = path.read_bytes()
    path.write_bytes(good + _corrupt(bytes(4096), "random"))  # the header still matches this driver
    assert _pipeline_cache_run(vulkan_device, tmp_path) == 0


def _spirv_worker(cache: str, seconds: float) -> set[str]:
    """Compile the GLSL kernels over and over for ``seconds`` (another process); the SPIR-V digests seen."""
    os.environ["DEVICELAYER_CACHE"] = cache
    from devicelayer.backends.vulkan import spirv as vulkan_spirv

    seen, end = set(), time.monotonic() + seconds
    while time.monotonic() < end:
        for i, src in enumerate(GLSL_KERNELS):
            seen.add(f"{i}:{hashlib.sha256(vulkan_spirv.compile_glsl(src)).hexdigest()}")
    return seen


def _vandal(folder: str, seconds: float) -> int:
    """Damage every file in ``folder`` in place (truncate, scribble), over and over for ``seconds``; how many times."""
    rng = np.random.default_rng(0)
    damaged, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        for path in Path(folder).glob("*"):
            try:
                with open(path, "r+b") as fh:
                    size = fh.seek(0, os.SEEK_END)
                    if rng.random() < 0.5:
                        fh.truncate(int(rng.integers(0, size + 1)))
                    else:
                        fh.seek(int(rng.integers(0, max(size, 1))))
                        fh.write(rng.integers(0, 256, 16, dtype=np.uint8).tobytes())
                damaged += 1
            except OSError:
                pass
        time.sleep(0.002)
    return damaged


@pytest.mark.timeout(180)
def test_spirv_cache_written_by_several_processes_while_being_damaged(tmp_path, monkeypatch):
    vs = _spirv()
    monkeypatch.setenv("DEVICELAYER_CACHE", str(tmp_path / "reference"))
    want = {f"{i}:{hashlib.sha256(vs.compile_glsl(src)).hexdigest()}" for i, src in enumerate(GLSL_KERNELS)}
    shared = tmp_path / "shared"
    (shared / "spirv").mkdir(parents=True)
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        writers = [pool.apply_async(_spirv_worker, (str(shared), 4.0)) for _ in range(2)]
        vandal = pool.apply_async(_vandal, (str(shared / "spirv"), 3.0))
        seen = [w.get(150) for w in writers]
        assert vandal.get(150) > 0
    assert seen == [want, want]  # every compile, hit or miss, gave the right SPIR-V
    monkeypatch.setenv("DEVICELAYER_CACHE", str(shared))
    assert {f"{i}:{hashlib.sha256(vs.compile_glsl(src)).hexdigest()}" for i, src in enumerate(GLSL_KERNELS)} == want
    files = sorted((shared / "spirv").iterdir())
    assert len(files) == len(GLSL_KERNELS) and all(vs._cache_read(p, p.stem) is not None for p in files)


def _pipeline_saver(cache: str, kernel: int, saves: int) -> bool:
    """In another process: run one of the GLSL kernels on the first Vulkan device, then save its pipeline cache often."""
    os.environ.update(DEVICELAYER_CACHE=cache, DEVICELAYER_BACKENDS="vulkan")
    dev = dl.devices()[0]
    out = _increment_on(dev, GLSL_KERNELS[kernel])
    for _ in range(saves):
        dev.save_pipeline_cache()
    return bool((out == [np.arange(1, 65), np.arange(2, 66), np.arange(64) * 3][kernel]).all())


@pytest.mark.timeout(180)
def test_pipeline_cache_saved_by_several_processes_at_once(vulkan_device, tmp_path):
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        assert pool.starmap(_pipeline_saver, [(str(tmp_path), k, 50) for k in range(3)]) == [True] * 3
    (path,) = (tmp_path / "vulkan").iterdir()  # one file, no temporary ones left behind
    assert path.name.startswith("pipelines-") and path.stat().st_size >= 32
    size = path.stat().st_size  # (the run below saves the cache again, and a driver may add to it)
    assert _pipeline_cache_run(vulkan_device, tmp_path / "vulkan") == size


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["truncated", "random"])
def test_corrupted_cuda_kernel_cache_is_rebuilt(tmp_path, kind):
    """CuPy's disk cache ($CUPY_CACHE_DIR) behind the CUDA backend: damaged files are compiled again and rewritten."""
    if not any(d.info.backend == "cuda" for d in dl.devices()):
        pytest.skip("no CUDA device present")
    env = {"CUPY_CACHE_DIR": str(tmp_path), "DEVICELAYER_BACKENDS": "cuda"}
    assert all(_use_every_device(env)["devices"].values())
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files, "nothing was cached"
    damaged = {p: _corrupt(p.read_bytes(), kind) for p in files}
    for p, data in damaged.items():
        p.write_bytes(data)
    assert all(_use_every_device(env)["devices"].values())
    assert all(p.read_bytes() != data for p, data in damaged.items())


# -- 5. the process: a fork, the interpreter's exit, a driver that crashes -----------------------------------------
def _new_host_upload(wait) -> dl.Event:
    """An upload to the host device of this process (a new one in a forked child) after ``wait``."""
    host = dl.device("host")
    return host.pool.upload(host.pool.allocate(16), np.zeros(16, np.uint8), wait=wait)


def _calls_on_a_device_of_the_parent(device):
    """name -> a call on ``device`` or on what was made of it, each set up now (before the fork); and a function
    that releases what they use."""
    prog = device.compile(source(INCREMENT, device), "increment")
    buf = device.pool.allocate(256, np.int32)
    device.pool.upload(buf, np.arange(64, dtype=np.int32)).wait(60)
    done = device.launch(prog, [buf, 64], 64)
    done.wait(60)
    tensor = dl.tensor(np.ones(8, np.float32), device)
    recording = device.record()
    recording.launch(prog, [buf, 64], 64)
    recording.finish()
    g = dl.Graph()
    g.output("y", g.relu(g.input("x", (8,))))
    plan = g.compile([device])
    gate = dl.UserEvent("held upload")  # work the device accepted but has not done at the fork
    held = device.pool.allocate(256, np.int32)
    pending = device.pool.upload(held, np.zeros(64, np.int32), wait=[gate])
    calls = {
        "allocate": lambda: device.pool.allocate(64),
        "upload": lambda: device.pool.upload(buf, np.zeros(64, np.int32)),
        "launch": lambda: device.launch(prog, [buf, 64], 64),
        "download": lambda: device.pool.download(buf, np.empty(64, np.int32)),
        "compile": lambda: device.compile(source(INCREMENT, device) + "\n", "increment"),
        "synchronize": device.synchronize,
        "free": lambda: device.pool.free(buf),
        "tensor.numpy": tensor.numpy,
        "replay": recording.replay,
        "plan": lambda: plan(x=np.ones(8, np.float32)),
        "wait on pending work": lambda: pending.wait(30),
        "done of pending work": lambda: pending.done,
        "callback on pending work": lambda: pending.add_done_callback(print),
        "when_all of pending work": lambda: dl.when_all([pending]),
        "pending work as wait= of a new device": lambda: _new_host_upload(wait=[pending]),
    }

    def release() -> None:
        gate.set()
        plan.release()
        recording.release()
        for b in (held, buf, tensor.buffer):
            device.pool.free(b)
    return calls, release


@pytest.mark.timeout(180)
def test_forked_child_refuses_a_device_of_the_parent_at_once(device):
    """Every call on a device created before os.fork() raises BackendUnavailable in the child, none waits."""
    from forked import run_in_fork

    calls, release = _calls_on_a_device_of_the_parent(device)

    def child() -> dict:
        found = {}
        for name, call in calls.items():
            t0 = time.monotonic()
            try:
                call()
                found[name] = ["no error", "", 0.0]
            except Exception as exc:
                found[name] = [type(exc).__name__, str(exc), time.monotonic() - t0]
        device.close()  # (nothing to do: not an error either)
        return found

    try:
        report = run_in_fork(child, timeout=60)["value"]
    finally:
        release()
    for name, (kind, message, seconds) in report.items():
        assert kind == "BackendUnavailable", (name, kind, message)
        assert "before os.fork()" in message and device.id in message, (name, message)
        assert seconds < 5, (name, seconds)
    assert (_increment_on(device, source(INCREMENT, device)) == np.arange(1, 65)).all()  # the parent's still works


def _round_trip(device_id: str) -> list[int]:
    return _increment_on(dl.device(device_id), source(INCREMENT, dl.device(device_id)), 16).tolist()


@pytest.mark.timeout(180)
def test_forked_child_starts_the_backends_that_allow_it_afresh(device):
    """dl.device() in the child: a new device where the backend is fork-safe, else BackendUnavailable saying why."""
    from forked import run_in_fork

    from devicelayer.registry import _registry

    fork_safe = getattr(type(_registry.load()[device.info.backend]), "fork_safe", False)
    report = run_in_fork(lambda: [dl.device(device.id) is not device, _round_trip(device.id)], timeout=90)
    if fork_safe:
        assert report.get("value") == [True, list(range(1, 17))], report
    else:
        assert report.get("error") == "BackendUnavailable", report
        assert "os.fork()" in report["message"] and "'spawn'" in report["message"], report


#: devices of this process, for workers of a multiprocessing pool forked from it
_BEFORE_FORK: dict[str, dl.Device] = {}


def _use_device_of_parent(device_id: str) -> list[str]:
    try:
        _BEFORE_FORK[device_id].pool.allocate(64)
    except Exception as exc:
        return [type(exc).__name__, str(exc)]
    return ["no error", ""]


def _use_fresh_device(device_id: str) -> list:
    try:
        return ["ok", _round_trip(device_id)]
    except dl.BackendUnavailable as exc:
        return ["BackendUnavailable", str(exc)]


@pytest.mark.timeout(180)
def test_multiprocessing_fork_workers_refuse_the_parents_device_and_start_their_own(device):
    from devicelayer.registry import _registry

    fork_safe = getattr(type(_registry.load()[device.info.backend]), "fork_safe", False)
    _BEFORE_FORK[device.id] = device
    pool = multiprocessing.get_context("fork").Pool(1)
    try:
        old = pool.apply_async(_use_device_of_parent, (device.id,)).get(60)
        fresh = pool.apply_async(_use_fresh_device, (device.id,)).get(90)
    finally:
        pool.terminate()
        pool.join()
        _BEFORE_FORK.clear()
    assert old[0] == "BackendUnavailable" and "before os.fork()" in old[1], old
    if fork_safe:
        assert fresh == ["ok", list(range(1, 17))], fresh
    else:
        assert fresh[0] == "BackendUnavailable" and "'spawn'" in fresh[1], fresh


FORK_BEFORE_ANY_DEVICE = '''
import os, sys
import devicelayer as dl
pid = os.fork()
ids = [d.id for d in dl.devices()]
if pid == 0:
    print("CHILD", ids, flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print("PARENT", ids, flush=True)
'''


@pytest.mark.timeout(300)
def test_a_child_forked_before_any_backend_started_has_every_device():
    out = subprocess.run([sys.executable, "-c", FORK_BEFORE_ANY_DEVICE], capture_output=True, text=True,
                         cwd=ROOT, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = dict(ln.split(" ", 1) for ln in out.stdout.splitlines() if ln.startswith(("CHILD", "PARENT")))
    assert lines["CHILD"] == lines["PARENT"] == str([d.id for d in dl.devices()])


#: run in a fresh process: a kernel that never ends, work queued behind it on its device and on another one,
#: the program gives up waiting (EventTimeout), drops most of it (a function returns) and ends holding the rest
GIVE_UP_AND_EXIT = f'''
import sys
import numpy as np
import devicelayer as dl
sys.path.insert(0, {str(TESTS)!r})
from kernels import SPIN, SPIN_GRID, source


def give_up(dev):
    prog = dev.compile(source(SPIN, dev), "spin")
    flag = dev.pool.allocate(64, np.int32)
    dev.pool.upload(flag, np.zeros(16, np.int32)).wait(60)
    run = dev.launch(prog, [flag, 5], *SPIN_GRID.get(dev.info.kernel_language, ((1,), None)))
    other = dev.pool.allocate(64, np.int32)
    waiting = [run, dev.pool.upload(other, np.ones(16, np.int32)),  # behind the kernel on its device
               dev.pool.download(flag, np.empty(16, np.int32))]
    others = [d for d in dl.devices() if d is not dev] if sys.argv[2] == "registry" else []
    if others:  # behind it on another device (a waiter thread blocks in the driver for it)
        buf = others[0].pool.allocate(64, np.int32)
        waiting.append(others[0].pool.upload(buf, np.zeros(16, np.int32), wait=[run]))
    gave_up = 0
    for ev in waiting:
        try:
            ev.wait(0.5)
        except dl.EventTimeout:
            gave_up += 1
    print("GAVE UP", gave_up, "OF", len(waiting), flush=True)
    return waiting[-1]


if sys.argv[2] == "registry":
    device = dl.device(sys.argv[1])
else:  # a device of the program's own, which nothing of devicelayer's holds (nor a waiter thread)
    from devicelayer.registry import _instantiate, _registry

    backend = _instantiate(_registry._candidates()[dl.device(sys.argv[1]).info.backend])
    device = next(d for d in backend.devices() if d.id == sys.argv[1])
kept = give_up(device)
print("RETURNED", flush=True)
'''


@pytest.mark.timeout(180)
@pytest.mark.parametrize("owner", ["registry", "private"])
def test_process_exits_after_giving_up_on_a_kernel_that_never_ends(device, owner):
    """Neither dropping work the program gave up on nor the interpreter's exit waits for it (no os._exit)."""
    if device.info.kernel_language not in SPIN:
        pytest.skip(f"no spinning kernel in {device.info.kernel_language}")
    t0 = time.monotonic()
    try:
        out = subprocess.run([sys.executable, "-c", GIVE_UP_AND_EXIT, device.id, owner], capture_output=True,
                             text=True, cwd=ROOT, timeout=60)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the process did not exit within 60 s; it printed {exc.stdout!r}")
    assert out.returncode == 0, out.stderr[-3000:]
    gave_up = out.stdout.split("GAVE UP ")[-1].split()
    assert gave_up[0] == gave_up[2] != "0" and "RETURNED" in out.stdout, out.stdout
    assert time.monotonic() - t0 < 60


EXIT_WITH_STATUS = '''
import sys
sys.path.insert(0, "tests")
import numpy as np
import devicelayer as dl
from kernels import SPIN, SPIN_GRID, source

dev = dl.device(sys.argv[1])
flag = dev.pool.allocate(64, np.int32)
dev.pool.upload(flag, np.zeros(16, np.int32)).wait(60)
run = dev.launch(dev.compile(source(SPIN, dev), "spin"), [flag, 5],
                 *SPIN_GRID.get(dev.info.kernel_language, ((1,), None)))
try:
    run.wait(0.3)
except dl.EventTimeout:
    print("GAVE UP", flush=True)
out = open(sys.argv[2], "w")
out.write("kept")  # a Python file left open: finalization closes it
sys.stdout.write("unflushed")  # Python's buffered stdout: flushed at finalization
sys.exit(3)
'''


@pytest.mark.timeout(180)
def test_exit_after_giving_up_on_work_keeps_its_status_and_output(device, tmp_path):
    """Ending the process before the drivers' native exit handlers (work still running) keeps sys.exit's status,
    Python's buffered output and the files Python had open."""
    if device.info.kernel_language not in SPIN:
        pytest.skip(f"no spinning kernel in {device.info.kernel_language}")
    target = tmp_path / "out.txt"
    try:
        out = subprocess.run([sys.executable, "-c", EXIT_WITH_STATUS, device.id, str(target)], capture_output=True,
                             text=True, cwd=ROOT, timeout=60)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the process did not exit within 60 s; it printed {exc.stdout!r}")
    assert out.returncode == 3, out.stderr[-3000:]
    assert out.stdout == "GAVE UP\nunflushed", out.stdout
    assert target.read_text() == "kept"


# -- a driver that crashes the process while its devices are listed ------------------------------------------------
LIST_DEVICES = '''
import devicelayer as dl
print("DEVICES", [d.id for d in dl.devices()], flush=True)
print("UNAVAILABLE", {u.backend: u.reason for u in dl.unavailable()}, flush=True)
'''


def _crashing_icd_folder(tmp_path: Path) -> Path:
    """A vendor folder whose .icd file makes the OpenCL ICD loader crash (checked: skipped where it does not)."""
    pytest.importorskip("pyopencl")
    folder = tmp_path / "vendors"
    folder.mkdir()
    (folder / "broken.icd").write_bytes(b"\0")  # the loader reads an empty library name and crashes
    crash = subprocess.run([sys.executable, "-c", "import pyopencl as cl; cl.get_platforms()"], capture_output=True,
                           env={**os.environ, "OCL_ICD_VENDORS": str(folder)}, timeout=120)
    if crash.returncode >= 0:
        pytest.skip(f"this OpenCL ICD loader survives a NUL .icd file (exit status {crash.returncode})")
    return folder


def _list_devices(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", LIST_DEVICES] if not args else \
        [sys.executable, "-c", "import sys; from devicelayer.cli import main; sys.exit(main(sys.argv[1:]))", *args]
    return subprocess.run(command, capture_output=True, text=True, env={**os.environ, **env}, cwd=ROOT, timeout=240)


def _parsed(out: subprocess.CompletedProcess) -> tuple[list[str], dict[str, str]]:
    assert out.returncode == 0, (out.returncode, out.stderr[-3000:])
    import ast

    lines = dict(ln.split(" ", 1) for ln in out.stdout.splitlines() if ln.startswith(("DEVICES", "UNAVAILABLE")))
    return ast.literal_eval(lines["DEVICES"]), ast.literal_eval(lines["UNAVAILABLE"])


@pytest.mark.timeout(600)
def test_a_driver_file_that_crashes_the_loader_costs_its_backend_not_the_process(tmp_path):
    folder = _crashing_icd_folder(tmp_path)
    env = {"OCL_ICD_VENDORS": str(folder), "DEVICELAYER_CACHE": str(tmp_path / "cache")}
    others = [d.id for d in dl.devices() if d.info.backend != "opencl"]
    for attempt in ("cold", "warm"):
        ids, unavailable = _parsed(_list_devices(env))
        assert ids == others, (attempt, ids)
        assert "SIGSEGV" in unavailable["opencl"] and "probe" in unavailable["opencl"], unavailable
    info = _list_devices(env, "info", "--json")
    assert info.returncode == 0, info.stderr[-3000:]
    listed = json.loads(info.stdout)
    assert [d["id"] for d in listed["devices"]] == others
    assert any(u["backend"] == "opencl" and "SIGSEGV" in u["reason"] for u in listed["unavailable"])
    table = _list_devices(env, "info")
    assert table.returncode == 0 and "SIGSEGV" in table.stdout, table.stderr[-3000:]
    # the driver files repaired: the verdict no longer applies and the backend is back
    (folder / "broken.icd").write_text("")
    if Path("/etc/OpenCL/vendors").is_dir():
        for icd in Path("/etc/OpenCL/vendors").glob("*.icd"):
            (folder / icd.name).write_bytes(icd.read_bytes())
    ids, unavailable = _parsed(_list_devices(env))
    assert "opencl" not in unavailable or "SIGSEGV" not in unavailable["opencl"], unavailable
    if any(d.info.backend == "opencl" for d in dl.devices()):
        assert ids == [d.id for d in dl.devices()]


@pytest.mark.timeout(600)
def test_a_crashing_driver_is_survived_with_a_cache_folder_that_cannot_be_written(tmp_path):
    folder = _crashing_icd_folder(tmp_path)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would be")
    ids, unavailable = _parsed(_list_devices({"OCL_ICD_VENDORS": str(folder),
                                              "DEVICELAYER_CACHE": str(blocker / "cache")}))
    assert ids == [d.id for d in dl.devices() if d.info.backend != "opencl"]
    assert "SIGSEGV" in unavailable["opencl"] and "verdict kept" not in unavailable["opencl"], unavailable


def test_probe_verdicts_are_read_from_the_cache_while_the_driver_files_stay_the_same(tmp_path, monkeypatch):
    """A warm start starts no probe: a verdict planted in the cache file is the one given."""
    from devicelayer import probe

    monkeypatch.setenv("DEVICELAYER_CACHE", str(tmp_path))
    driver = tmp_path / "driver.json"
    driver.write_text("{}")
    requests = {"host": ("devicelayer.backends.host:HostBackend", [probe.stamp(driver)])}
    assert probe.verdicts(requests) == {}  # probed: the host backend starts
    (path,) = (tmp_path / "probes").iterdir()
    kept = json.loads(path.read_text())
    assert kept["verdict"] == "" and kept["fingerprint"] == requests["host"][1]
    path.write_text(json.dumps({**kept, "verdict": "planted verdict"}))
    assert probe.verdicts(requests)["host"].startswith("planted verdict")
    driver.write_text('{"changed": 1}')  # another fingerprint: probed again
    assert probe.verdicts({"host": ("devicelayer.backends.host:HostBackend", [probe.stamp(driver)])}) == {}


_KEEP_AT_EXIT = r"""
import gc, sys
import numpy as np
import devicelayer as dl
from devicelayer import lifecycle

held = []
for d in dl.devices():
    buf = d.pool.allocate(256, np.float32)
    d.pool.upload(buf, np.arange(64, dtype=np.float32)).wait()
    g = dl.Graph()
    x = g.input("x", (4, 16))
    g.output("y", g.relu(g.add(x, x)))
    plan = g.compile([d])
    plan.run_numpy({"x": np.ones((4, 16), np.float32)})
    held += [buf, plan]
cycle = [held]
cycle.append(cycle)  # (freed only by the collector, in no set order, as at finalization)
del held


class Deprecated:  # an object whose class warns when asked for (as torch.distributed.reduce_op does)
    @property
    def __class__(self):
        import warnings
        warnings.warn("asked for __class__", FutureWarning)
        return type(self)


odd = Deprecated()
import warnings
warnings.simplefilter("always")  # (a warning raised as an error would be caught by the walk, unseen)
lifecycle._at_exit()
del odd
kept = {id(o) for group in lifecycle._kept for o in (group if isinstance(group, list) else [group])}
from devicelayer.memory import Buffer
bufs = [o for o in gc.get_objects() if isinstance(o, Buffer)]
print("devices kept", all(id(d) in kept for d in dl.devices()))
print("buffers kept", bool(bufs) and all(id(b) in kept for b in bufs))
sys.stdout.flush()
sys.exit(5)
"""


def test_exit_keeps_every_device_and_its_objects_past_finalization():
    """At exit every device, buffer and plan recording is kept (the collector would hand them to the drivers in no
    set order after their bindings' exit handlers ran); the exit status and output are the program's, and the walk
    that finds those objects raises no warning an object gives when its class is asked for."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _KEEP_AT_EXIT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 5, (done.returncode, done.stderr[-2000:])
    assert "devices kept True" in done.stdout and "buffers kept True" in done.stdout, done.stdout + done.stderr[-2000:]
    assert "asked for __class__" not in done.stderr  # the walk over every object warns of none of them

"""Measured device figures: launch latency, transfer bandwidth, float32 GEMM rate — cached per device and driver."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .device import Device
from .diskcache import cache_dir, locked, write

#: version of the cached figures; bumped when what is measured changes
MEASURE_SCHEMA = 1


def cache_path() -> Path:
    """Where measured figures are kept (``measured.json`` in the disk cache folder, ``diskcache.cache_dir()``)."""
    return cache_dir() / "measured.json"


def _key(device: Device) -> str:
    i = device.info
    return f"{i.id}|{i.name}|{i.driver_version}|{MEASURE_SCHEMA}"


def _load() -> dict[str, Any]:
    try:
        return json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}


def cached(device: Device) -> dict[str, Any] | None:
    """Figures measured earlier for this device and driver, or None."""
    return _load().get(_key(device))


def _store(device: Device, figures: dict[str, Any]) -> None:
    """Add the figures to the cache, under a lock, so figures other processes store at the same time are kept (a
    cache that cannot be written is warned of once and skipped)."""
    path = cache_path()
    with locked(path):
        data = _load()
        data[_key(device)] = figures
        write(path, json.dumps(data, indent=1).encode())


def median_time(fn: Callable[[], Any], repeat: int) -> float:
    """Median seconds of ``repeat`` calls of ``fn``."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


STEPS = ("launch", "upload", "download", "device copy", "gemm")


def measure(device: Device, quick: bool = False, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Measure ``device`` now and cache the figures; ``progress(step)`` is called as each step starts."""
    from . import ops
    from .tensors import tensor

    step = progress or (lambda _: None)
    pool = device.pool
    figures: dict[str, Any] = {"id": device.id, "name": device.info.name, "driver": device.info.driver_version,
                               "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    step("launch")
    x = tensor(np.ones(256, np.float32), device)
    ops.relu(x).numpy()
    repeat = 30 if quick else 200
    figures["launch_wait_us"] = median_time(lambda: ops.run("relu", [x], out=[x])[0].ready.wait(), repeat) * 1e6
    nbytes = (8 if quick else 64) << 20
    nbytes = min(nbytes, device.info.max_allocation // 2)
    host = np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8)
    back = np.empty_like(host)
    a, b = pool.allocate(nbytes), pool.allocate(nbytes)
    reps = 3 if quick else 7
    step("upload")
    pool.upload(a, host).wait()
    figures["upload_GBps"] = nbytes / median_time(lambda: pool.upload(a, host).wait(), reps) / 1e9
    step("download")
    figures["download_GBps"] = nbytes / median_time(lambda: pool.download(a, back).wait(), reps) / 1e9
    step("device copy")
    pool.copy(b, a).wait()
    figures["copy_GBps"] = 2 * nbytes / median_time(lambda: pool.copy(b, a).wait(), reps) / 1e9
    pool.free(a)
    pool.free(b)
    step("gemm")
    n = 512 if quick else 2048
    rng = np.random.default_rng(1)
    ma = tensor(rng.standard_normal((n, n)).astype(np.float32), device)
    mb = tensor(rng.standard_normal((n, n)).astype(np.float32), device)
    out = ops.matmul(ma, mb)
    out.ready.wait()
    t = median_time(lambda: ops.run("matmul", [ma, mb], out=[out])[0].ready.wait(), 3)
    figures["gemm_f32_TFLOPs"] = 2 * n**3 / t / 1e12
    figures["gemm_n"] = n
    for tns in (x, ma, mb, out):
        pool.free(tns.buffer)
    _store(device, figures)
    return figures

"""One process of tests/test_cache_concurrency.py: compile and run kernels through the disk caches of
``$DEVICELAYER_CACHE`` while another process does the same.

    python tests/cache_worker.py ROUND WORKER WORKERS [--offline]

On every device: ops rendered per device (on Vulkan, GLSL compiled to SPIR-V through the cache) checked
against NumPy, and on Vulkan raw GLSL kernels of this round compiled from 4 threads at once and run; then the
Vulkan pipeline cache saved several times and the device's figures measured and stored in the cache of
measured figures (under a key of this worker's own, so that a lost update shows as a missing key).
The workers of a round start each step together (a barrier of files in the cache folder).
``--offline``: no GLSL compiler may run (every kernel must come from the cache) and nothing is measured.
Prints one JSON line: what was checked and what went wrong.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

import devicelayer as dl

GLSL = """#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer V {{ float v[]; }};
layout(push_constant) uniform P {{ float a; int n; }} p;
void main() {{ uint i = gl_GlobalInvocationID.x; if (i < uint(p.n)) v[i] = v[i] * p.a + {k}.0; }}
// round {round}
"""
KERNELS = 6
STORES = 25  # figures stored per device besides the measured ones


def check_ops(device: dl.Device, wrong: list[str]) -> int:
    """A few ops on ``device`` against NumPy; how many were checked."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((16, 24)).astype(np.float32)
    b = rng.standard_normal((24, 8)).astype(np.float32)
    ta, tb = dl.tensor(a, device), dl.tensor(b, device)
    cases = {"relu": (dl.ops.relu(ta), np.maximum(a, 0)), "matmul": (dl.ops.matmul(ta, tb), a @ b),
             "add": (dl.ops.add(ta, ta), a + a), "tanh": (dl.ops.tanh(ta), np.tanh(a))}
    for name, (t, want) in cases.items():
        if not np.allclose(t.numpy(), want, rtol=1e-4, atol=1e-5):
            wrong.append(f"{device.id}: {name} differs from NumPy")
        t.free()
    ta.free()
    tb.free()
    return len(cases)


def check_glsl(device: dl.Device, round_: int, wrong: list[str]) -> int:
    """This round's raw GLSL kernels, each compiled from 4 threads at once and run; how many were run."""
    x = np.arange(256, dtype=np.float32)

    def one(k: int) -> None:
        try:
            prog = device.compile(GLSL.format(k=k, round=round_), f"k{k}")
            buf = device.pool.allocate(x.nbytes, np.float32)
            device.pool.upload(buf, x)
            device.launch(prog, [buf, 2.0, x.size], x.size)
            out = np.empty_like(x)
            device.pool.download(buf, out).wait(60)
            device.pool.free(buf)
            if not np.array_equal(out, x * 2 + k):
                wrong.append(f"{device.id}: GLSL kernel {k} of round {round_} gave wrong numbers")
        except Exception as exc:  # noqa: BLE001 - reported
            wrong.append(f"{device.id}: GLSL kernel {k}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=one, args=(k % KERNELS,)) for k in range(4 * KERNELS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 4 * KERNELS


def barrier(name: str, worker: int, workers: int) -> None:
    """Wait until all ``workers`` of this round reached the step ``name``."""
    folder = Path(os.environ["DEVICELAYER_CACHE"]) / "barriers"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.{worker}").touch()
    deadline = time.monotonic() + 120
    while len(list(folder.glob(f"{name}.*"))) < workers and time.monotonic() < deadline:
        time.sleep(0.001)


def main() -> int:
    round_, worker, workers = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    offline = "--offline" in sys.argv
    if offline:
        from devicelayer.backends.vulkan import spirv as vulkan_spirv

        def refuse(*args, **kwargs):
            raise AssertionError("a GLSL compiler ran: the SPIR-V was not taken from the cache")

        vulkan_spirv._compile_shaderc = vulkan_spirv._compile_glslc = refuse
    from devicelayer import measure

    schema = measure.MEASURE_SCHEMA = f"{measure.MEASURE_SCHEMA}+worker{worker}"
    wrong: list[str] = []
    checked: dict[str, int] = {}
    rounds = range(round_ + 1) if offline else [round_]  # offline: every round's kernels, from the cache
    for device in dl.devices():
        barrier(f"r{round_}-{device.id}-compile", worker, workers)
        checked[device.id] = check_ops(device, wrong)
        if device.info.backend == "vulkan":
            for r in rounds:
                checked[device.id] += check_glsl(device, r, wrong)
            if offline and not device.pipeline_cache_loaded:
                wrong.append(f"{device.id}: the pipeline cache was not loaded")
            barrier(f"r{round_}-{device.id}-save", worker, workers)
            for _ in range(5):
                device.save_pipeline_cache()
        if not offline:
            figures = measure.measure(device, quick=True)
            barrier(f"r{round_}-{device.id}-store", worker, workers)
            for i in range(STORES):  # many writers of the file at once, each figure under a key of its own
                measure.MEASURE_SCHEMA = f"{schema}.{i}"
                measure._store(device, figures)
            measure.MEASURE_SCHEMA = schema
    print(json.dumps({"worker": worker, "round": round_, "checked": checked, "wrong": wrong}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

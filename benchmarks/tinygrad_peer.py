"""devicelayer against tinygrad's OpenCL backend on the same OpenCL driver (PoCL on the CPU), model by model.

    python -m benchmarks.tinygrad_peer [--models-dir DIR] [--model NAME ...] [--rounds R] [--block S] [--pause S]
                                       [--seed N] [--no-vulkan] [--no-webgpu] [--warm-caches]
                                       [--kernel-profile slower|all|none] [--model-timeout S] [--out DIR] [--tag TAG]

Needs ``pip install tinygrad`` (and ``dawn-python`` for the WEBGPU contestant); neither is a devicelayer dependency.

Each model (``DIR/NAME.onnx``, ``benchmarks.arch_models``: random weights, batch 1) runs in a child process of its
own (a driver crash or a hang costs that model's row, not the run), with every contestant in that one process:

* devicelayer: ``devicelayer.onnx.load(path).compile(["opencl:0"])``, run by ``plan.run_numpy(feeds)``;
* devicelayer on ``vulkan:0`` (lavapipe here) as a second row, the same way (``--no-vulkan`` leaves it out);
* tinygrad: ``tinygrad.nn.onnx.OnnxRunner(path)`` on its ``CL`` device (``DEV=CL``: it opens the first OpenCL
  platform's first GPU or default device through ``libOpenCL``, PoCL here), the runner wrapped in ``TinyJit`` as
  tinygrad's own ONNX benchmarks do; a call is ``Tensor(x)`` per input, the jitted runner, ``.numpy()`` per output;
* tinygrad on ``WEBGPU`` the same way, through the Dawn library the ``dawn-python`` wheel ships, whose Vulkan back
  end runs on lavapipe here: tinygrad has no Vulkan backend, so this is its way onto a Vulkan-only device, the
  peer of devicelayer's ``vulkan:0`` row (``--no-webgpu`` leaves it out; without Dawn it is an error of its own).

Ratios: devicelayer ``opencl:0`` / tinygrad ``CL``, ``vulkan:0`` / ``CL`` and ``vulkan:0`` / ``WEBGPU``.

All take the same NumPy inputs (``host_vs_onnxruntime.random_feeds``: normal float32, token ids below 100, masks
of ones, a fresh seed per run unless ``--seed``) and give NumPy outputs; each output is compared with onnxruntime's
CPU result (largest difference over the largest magnitude of onnxruntime's output).

Cold start: the devices are opened first (untimed), then per contestant ``load_s`` (reading the model),
``compile_s`` (devicelayer's compile; tinygrad compiles lazily, so 0) and ``first_run_s`` (devicelayer: its first
run; tinygrad: the two calls ``TinyJit`` needs before it replays, the first of which compiles every kernel), and
``ready_s``, their sum.  By default every kernel cache either side keeps on disk points at a fresh empty folder per
model (``POCL_CACHE_DIR``, tinygrad's ``CACHEDB``, ``PYOPENCL_NO_CACHE``, ``MESA_SHADER_CACHE_DIR``,
``DEVICELAYER_CACHE``), so ``ready_s`` is a first run on a fresh machine; ``--warm-caches`` keeps the user's.

Timing: after the two calls each made above (prepared, then checked again) and one to size its blocks,
``--rounds`` rounds; in each, every contestant runs a block of back-to-back calls (as many as fit ``--block``
seconds, at least one), the order rotating between rounds, a ``--pause`` before each block.  Per contestant the
median over rounds of the per-call time; ``ratio`` = devicelayer / tinygrad (below 1: devicelayer is faster), with
the range of the per-round ratios.

After timing, a diagnosis per devicelayer device: kernel launches per run, nodes per device, transfers, and the
device time by op type of profiled runs (``plan(profile=True)``: three, one where a run takes 0.5 s or more; per
node the median; the largest first); for tinygrad, its kernels (and copies) per replayed run.  That profile is
devicelayer's host-side estimate (per node, from submission and completion callbacks): on an in-order CPU queue it
can put the whole run on one node.  So where devicelayer's ``opencl:0`` was slower than tinygrad's ``CL``
(``--kernel-profile``), a second child (same caches, the queue with OpenCL profiling: ``DEVICELAYER_PROFILE=1``)
times every kernel launch of one run of each from OpenCL's own event timestamps (devicelayer's through
``pyopencl.enqueue_nd_range_kernel``, tinygrad's through ``CLProgram`` with ``wait=True``), summed by kernel name.

Prints the tables; writes JSON (machine, date, commit, load averages, versions of PoCL, Mesa, tinygrad, Dawn,
onnxruntime; per model rows) under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

RESULTS = Path(__file__).resolve().parent / "results"
MODELS = ["squeezenet", "ocr_classifier", "bert_64", "whisper_encoder_64", "resnet18", "mobilenet_v2"]
#: (devicelayer device, tinygrad device) pairs whose ratio is reported: the same OpenCL driver, and lavapipe's
#: Vulkan against tinygrad's two choices there (CL on PoCL, WEBGPU through Dawn's Vulkan back end on lavapipe)
PAIRS = [("opencl:0", "CL"), ("vulkan:0", "CL"), ("vulkan:0", "WEBGPU")]
_STAGE = "@@stage "  # a child's progress line on stderr
_ROW = "@@row "  # a child's result line on stdout


# -- one model, in the child process ------------------------------------------------------------------------------
class Contestant:
    """One way to run the model: ``prepare()`` loads and compiles it (timed), ``run(feeds)`` gives NumPy outputs."""

    name = ""

    def __init__(self, path: Path, names: list[str]) -> None:
        self.path, self.names = path, names
        self.times: dict[str, float] = {}
        self.run_s = 0.0  # the median seconds per run, once timed

    def prepare(self, feeds: dict[str, Any]) -> list[Any]:
        """Load, compile and run once (or as often as the runtime needs to be ready); the first outputs."""
        raise NotImplementedError

    def run(self, feeds: dict[str, Any]) -> list[Any]:
        """One timed call: NumPy inputs in, NumPy outputs (in ``names`` order) out."""
        raise NotImplementedError

    def diagnose(self, feeds: dict[str, Any]) -> dict[str, Any]:
        """Why it takes the time it does (kernel counts, profiles), after timing."""
        return {}

    def release(self) -> None:
        """Free what ``prepare`` made."""


class Devicelayer(Contestant):
    """A devicelayer plan on one device, ``plan.run_numpy``."""

    def __init__(self, path: Path, names: list[str], device: str) -> None:
        super().__init__(path, names)
        self.device, self.name = device, f"devicelayer {device}"
        self.plan: Any = None

    def prepare(self, feeds: dict[str, Any]) -> list[Any]:
        import devicelayer.onnx as dlo

        t0 = time.perf_counter()
        model = dlo.load(str(self.path))
        t1 = time.perf_counter()
        self.plan = model.compile([self.device])
        t2 = time.perf_counter()
        out = self.run(feeds)
        t3 = time.perf_counter()
        self.times = {"load_s": t1 - t0, "compile_s": t2 - t1, "first_run_s": t3 - t2, "ready_s": t3 - t0}
        return out

    def run(self, feeds: dict[str, Any]) -> list[Any]:
        got = self.plan.run_numpy(feeds)
        return [got[n] for n in self.names]

    def diagnose(self, feeds: dict[str, Any]) -> dict[str, Any]:
        """Kernel launches, placement, transfers and, per op type, the device time of profiled runs."""
        table = self.plan.placement_table()
        per_device: dict[str, int] = {}
        for row in table:
            per_device[row["device"]] = per_device.get(row["device"], 0) + 1
        runs, walls = [], []
        for _ in range(3 if self.run_s < 0.5 else 1):
            t0 = time.perf_counter()
            self.plan.run_numpy(feeds, profile=True)
            walls.append(time.perf_counter() - t0)
            runs.append(list(self.plan.last_profile or []))
        return {"kernels_per_run": self.plan.kernel_counts().get("after"), "nodes_per_device": per_device,
                "transfers": self.plan.transfers,
                "profile": summarise_profile(median_profile(runs), statistics.median(walls))}

    def release(self) -> None:
        if self.plan is not None:
            self.plan.release()


def median_profile(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per node (in the first run's order) the median ``device_us`` and ``host_us`` over profiled runs."""
    by_node: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        for r in run:
            by_node.setdefault(r["node"], []).append(r)
    return [{"node": node, "op": rs[0]["op"], "device_us": statistics.median(r.get("device_us", 0.0) for r in rs),
             "host_us": statistics.median(r.get("host_us", 0.0) for r in rs)} for node, rs in by_node.items()]


def summarise_profile(profile: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    """A profiled run's records (node, op, device_us, host_us) summed by op type, the largest device time first."""
    ops: dict[str, dict[str, float]] = {}
    for r in profile:
        cur = ops.setdefault(r["op"], {"nodes": 0, "device_ms": 0.0, "host_ms": 0.0})
        cur["nodes"] += 1
        cur["device_ms"] += r.get("device_us", 0.0) / 1e3
        cur["host_ms"] += r.get("host_us", 0.0) / 1e3
    top = sorted(ops.items(), key=lambda kv: -kv[1]["device_ms"])
    nodes = sorted(profile, key=lambda r: -r.get("device_us", 0.0))[:5]
    return {"wall_ms": wall_s * 1e3, "device_ms": sum(v["device_ms"] for v in ops.values()),
            "host_ms": sum(v["host_ms"] for v in ops.values()),
            "by_op": [{"op": k, **{f: round(x, 3) for f, x in v.items()}} for k, v in top[:8]],
            "slowest_nodes": [{"node": r["node"], "op": r["op"], "device_ms": round(r.get("device_us", 0.0) / 1e3, 3)}
                              for r in nodes]}


class Tinygrad(Contestant):
    """tinygrad's ONNX runner on one of its devices (``CL``, ``WEBGPU``) inside ``TinyJit``."""

    def __init__(self, path: Path, names: list[str], device: str) -> None:
        super().__init__(path, names)
        self.device, self.name = device, f"tinygrad {device}"

    def prepare(self, feeds: dict[str, Any]) -> list[Any]:
        from tinygrad import TinyJit
        from tinygrad.nn.onnx import OnnxRunner

        t0 = time.perf_counter()
        runner = OnnxRunner(self.path).to(self.device)
        t1 = time.perf_counter()
        self.jit = TinyJit(lambda **kw: {k: v.realize() for k, v in runner(kw).items()})
        self.run(feeds)  # runs eagerly: schedules and compiles every kernel
        t2 = time.perf_counter()
        out = self.run(feeds)  # captured by the JIT; replayed from the next call on
        t3 = time.perf_counter()
        self.times = {"load_s": t1 - t0, "compile_s": 0.0, "first_run_s": t3 - t1, "eager_run_s": t2 - t1,
                      "capture_run_s": t3 - t2, "ready_s": t3 - t0}
        return out

    def run(self, feeds: dict[str, Any]) -> list[Any]:
        from tinygrad import Tensor

        got = self.jit(**{k: Tensor(v, device=self.device) for k, v in feeds.items()})
        return [got[n].numpy() for n in self.names]

    def diagnose(self, feeds: dict[str, Any]) -> dict[str, Any]:
        """Kernels (and copies) per replayed run, and tinygrad's estimate of the run's operations."""
        from tinygrad.helpers import GlobalCounters

        GlobalCounters.reset()
        self.run(feeds)
        return {"kernels_per_run": GlobalCounters.kernel_count, "gflop_estimate": GlobalCounters.global_ops / 1e9}

    def release(self) -> None:
        self.jit = None


def _stage(text: str) -> None:
    print(f"{_STAGE}{text}", file=sys.stderr, flush=True)


def _block(fn: Callable[[], Any], calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def alternate(runs: dict[str, Callable[[], Any]], rounds: int, block_s: float, pause: float) -> dict[str, list[float]]:
    """Seconds per call of each contestant per round: blocks of back-to-back calls, the order rotating by round."""
    calls = {}
    for name, fn in runs.items():  # (each ran twice already: prepared, then checked again)
        calls[name] = max(1, min(200, int(block_s / max(_block(fn, 1), 1e-5))))
    names, out = list(runs), {n: [] for n in runs}
    for r in range(rounds):
        _stage(f"timing round {r + 1}/{rounds}")
        for name in names[r % len(names):] + names[:r % len(names)]:
            time.sleep(pause)
            out[name].append(_block(runs[name], calls[name]))
    return out


def bench_child(path: Path, lineup: Lineup, rounds: int, block_s: float, pause: float, seed: int) -> dict:
    """One model's row: every contestant prepared, checked against onnxruntime, timed and diagnosed."""
    import onnx
    import onnxruntime as ort

    from benchmarks.host_vs_onnxruntime import max_rel_diff, random_feeds

    model = onnx.load(str(path), load_external_data=False)
    feeds = random_feeds(model, seed)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    want = sess.run(names, feeds)
    row: dict[str, Any] = {"model": path.stem, "nodes": len(model.graph.node), "seed": seed,
                           "inputs": {k: [list(v.shape), str(v.dtype)] for k, v in feeds.items()},
                           "contestants": {}, "errors": {}}
    row["devices"] = open_devices(lineup, row["errors"])
    contestants: list[Contestant] = ([Devicelayer(path, names, d) for d in lineup.devicelayer]
                                     + [Tinygrad(path, names, d) for d in lineup.tinygrad
                                        if f"tinygrad {d}" not in row["errors"]])
    ready = []
    for c in contestants:
        _stage(f"preparing {c.name}")
        try:
            got = c.prepare(feeds)
            again = c.run(feeds)
        except Exception as exc:  # noqa: BLE001 - a model a contestant cannot run is a row entry, not a crash
            row["errors"][c.name] = describe_error(exc)
            continue
        row["contestants"][c.name] = {**c.times, "max_rel_diff": max_rel_diff(got, want),
                                      "max_rel_diff_again": max_rel_diff(again, want)}
        ready.append(c)
    times = alternate({c.name: (lambda c=c: c.run(feeds)) for c in ready}, rounds, block_s, pause)
    for name, per_round in times.items():
        next(c for c in ready if c.name == name).run_s = statistics.median(per_round)
        row["contestants"][name].update(ms=statistics.median(per_round) * 1e3,
                                        rounds_ms=[round(t * 1e3, 3) for t in per_round])
    _ratios(row, times)
    for c in ready:
        _stage(f"diagnosing {c.name}")
        try:
            row["contestants"][c.name]["diagnosis"] = c.diagnose(feeds)
        except Exception as exc:  # noqa: BLE001
            row["contestants"][c.name]["diagnosis"] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        c.release()
    return row


def describe_error(exc: BaseException) -> str:
    """The exception with the innermost frame it came from (file name, line, function)."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    return f"{type(exc).__name__}: {str(exc)[:400]}{where}"


def _ratios(row: dict[str, Any], times: dict[str, list[float]]) -> None:
    """Per pair: devicelayer's median / tinygrad's median, and the range of the per-round ratios."""
    for ours, theirs in PAIRS:
        a, b = times.get(f"devicelayer {ours}"), times.get(f"tinygrad {theirs}")
        if a and b:
            per_round = [x / y for x, y in zip(a, b)]
            row.setdefault("ratios", {})[pair_name(ours, theirs)] = {
                "ratio": statistics.median(a) / statistics.median(b), "min": min(per_round), "max": max(per_round)}


def pair_name(ours: str, theirs: str) -> str:
    """The key of a ratio in a row's ``ratios``."""
    return f"{ours} / {theirs}"


class Lineup:
    """The devices of each side: devicelayer's ids, tinygrad's device names."""

    def __init__(self, vulkan: bool, webgpu: bool) -> None:
        self.devicelayer = ["opencl:0"] + (["vulkan:0"] if vulkan else [])
        self.tinygrad = ["CL"] + (["WEBGPU"] if webgpu else [])

    def names(self) -> list[str]:
        return [f"devicelayer {d}" for d in self.devicelayer] + [f"tinygrad {d}" for d in self.tinygrad]

    def pairs(self) -> list[tuple[str, str]]:
        return [(a, b) for a, b in PAIRS if a in self.devicelayer and b in self.tinygrad]


def open_devices(lineup: Lineup, errors: dict[str, str]) -> dict[str, Any]:
    """Open every device before anything is timed; what each is.  tinygrad's CL must be PoCL's device; a
    tinygrad device that does not open (WEBGPU without Dawn) is an error of that contestant."""
    import devicelayer as dl
    from tinygrad import Device

    found: dict[str, Any] = {}
    for d in lineup.devicelayer:
        info = dl.device(d).info
        found[f"devicelayer {d}"] = {"name": info.name, "driver": info.driver_version, "api": info.api_version}
    for d in lineup.tinygrad:
        try:
            dev = Device[d]
        except Exception as exc:  # noqa: BLE001
            errors[f"tinygrad {d}"] = f"device does not open: {type(exc).__name__}: {str(exc)[:300]}"
            continue
        found[f"tinygrad {d}"] = {"name": getattr(dev, "device_name", None),
                                  "driver": getattr(dev, "driver_version", None)}
    return found


# -- per-kernel device times on the shared OpenCL driver (a child of its own: profiling queues) ---------------------
def summarise_kernels(records: list[tuple[str, tuple, float]], wall_s: float) -> dict[str, Any]:
    """Kernel launches (name, global size, device ms) of one run summed by kernel name, the largest first."""
    names: dict[str, dict[str, float]] = {}
    for name, _size, ms in records:
        cur = names.setdefault(name, {"launches": 0, "ms": 0.0})
        cur["launches"] += 1
        cur["ms"] += ms
    top = sorted(names.items(), key=lambda kv: -kv[1]["ms"])
    slowest = sorted(records, key=lambda r: -r[2])[:6]
    return {"wall_ms": wall_s * 1e3, "launches": len(records), "kernel_ms": sum(r[2] for r in records),
            "by_kernel": [{"kernel": k, "launches": v["launches"], "ms": round(v["ms"], 3)} for k, v in top[:10]],
            "slowest_launches": [{"kernel": n, "global_size": list(g), "ms": round(ms, 3)} for n, g, ms in slowest]}


def devicelayer_kernels(run: Callable[[], Any]) -> dict[str, Any]:
    """One run with every ``pyopencl.enqueue_nd_range_kernel`` devicelayer makes timed by OpenCL's profiling
    (the queue has it only under ``DEVICELAYER_PROFILE=1``)."""
    import pyopencl as cl

    records: list[tuple[str, tuple, Any]] = []
    enqueue = cl.enqueue_nd_range_kernel

    def timed(queue: Any, kernel: Any, global_size: Any, local_size: Any, *rest: Any, **kw: Any) -> Any:
        event = enqueue(queue, kernel, global_size, local_size, *rest, **kw)
        records.append((kernel.function_name, tuple(global_size), event))
        return event

    cl.enqueue_nd_range_kernel = timed
    try:
        t0 = time.perf_counter()
        run()
        wall = time.perf_counter() - t0
    finally:
        cl.enqueue_nd_range_kernel = enqueue
    done = []
    for name, size, event in records:
        event.wait()
        done.append((name, size, (event.profile.end - event.profile.start) / 1e6))
    return summarise_kernels(done, wall)


def tinygrad_kernels(run: Callable[[], Any]) -> dict[str, Any]:
    """One run of tinygrad's CL programs, each waited for and timed by OpenCL's profiling (tinygrad's queue has it),
    so ``wall_ms`` here is not its pipelined time."""
    import ctypes

    from tinygrad.runtime import ops_cl
    from tinygrad.runtime.autogen import opencl as clapi

    def name_of(program: Any) -> str:
        buf = ctypes.create_string_buffer(256)
        clapi.clGetKernelInfo(program.kernel, clapi.CL_KERNEL_FUNCTION_NAME, 256, buf, None)
        return buf.value.decode()

    records: list[tuple[str, tuple, float]] = []
    call = ops_cl.CLProgram.__call__

    def timed(self: Any, *bufs: Any, wait: bool = False, **kw: Any) -> Any:
        seconds = call(self, *bufs, wait=True, **kw)
        size = tuple(g * l for g, l in zip(kw.get("global_size", ()), kw.get("local_size") or (1, 1, 1)))
        records.append((name_of(self), size, (seconds or 0.0) * 1e3))
        return seconds if wait else None

    ops_cl.CLProgram.__call__ = timed
    try:
        t0 = time.perf_counter()
        run()
        wall = time.perf_counter() - t0
    finally:
        ops_cl.CLProgram.__call__ = call
    return summarise_kernels(records, wall)


def kernels_child(path: Path, seed: int) -> dict[str, Any]:
    """Per-kernel device times of devicelayer's opencl:0 and tinygrad's CL on one model (after warm-up runs)."""
    import onnx

    from benchmarks.host_vs_onnxruntime import random_feeds

    feeds = random_feeds(onnx.load(str(path), load_external_data=False), seed)
    out: dict[str, Any] = {}
    for c, profile in ((Devicelayer(path, [], "opencl:0"), devicelayer_kernels), (Tinygrad(path, [], "CL"),
                                                                                  tinygrad_kernels)):
        _stage(f"kernel times of {c.name}")
        try:
            c.prepare(feeds)
            for _ in range(2):
                c.run(feeds)
            out[c.name] = profile(lambda c=c: c.run(feeds))
        except Exception as exc:  # noqa: BLE001
            out[c.name] = {"error": describe_error(exc)}
        c.release()
    return out


def child_main(args: argparse.Namespace) -> int:
    """``--child NAME``: bench one model (``--kernels``: time its kernels), print the result as one JSON line."""
    path = Path(args.models_dir) / f"{args.child}.onnx"
    if args.kernels:
        print(_ROW + json.dumps(kernels_child(path, args.seed), default=str), flush=True)
        return 0
    row = bench_child(path, Lineup(not args.no_vulkan, not args.no_webgpu), args.rounds, args.block, args.pause,
                      args.seed)
    print(_ROW + json.dumps(row, default=str), flush=True)
    return 0


# -- the parent: one child per model, progress, table, JSON --------------------------------------------------------
def _cache_env(folder: Path | None) -> dict[str, str]:
    """The child's environment: tinygrad on CL by default, its WEBGPU on the Dawn library that the dawn-python
    wheel ships (``WEBGPU_PATH``, unless set); with ``folder``, every kernel cache under it, empty."""
    env = {**os.environ, "DEV": "CL", "PYTHONUNBUFFERED": "1"}
    dawn = dawn_library()
    if dawn and "WEBGPU_PATH" not in env:
        env["WEBGPU_PATH"] = dawn
    if folder is not None:
        for sub in ("pocl", "mesa", "devicelayer"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        env.update(POCL_CACHE_DIR=str(folder / "pocl"), MESA_SHADER_CACHE_DIR=str(folder / "mesa"),
                   DEVICELAYER_CACHE=str(folder / "devicelayer"), CACHEDB=str(folder / "tinygrad.db"),
                   PYOPENCL_NO_CACHE="1")
    return env


def dawn_library() -> str | None:
    """The Dawn WebGPU library of the ``dawn-python`` wheel (``pydawn/lib``) for this machine, if installed."""
    import importlib.util

    spec = importlib.util.find_spec("pydawn")
    if spec is None or not spec.submodule_search_locations:
        return None
    arch = {"x86_64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}.get(platform.machine(), platform.machine())
    path = Path(list(spec.submodule_search_locations)[0]) / "lib" / f"libwebgpu_dawn_{arch}.so"
    return str(path) if path.is_file() else None


def run_child(cmd: list[str], env: dict[str, str], timeout: float,
              stage: Callable[[str], None]) -> tuple[dict[str, Any] | None, str, list[str]]:
    """Run a child; its JSON result (None if it gave none), why it ended, the last lines of its stderr.  Stage
    lines on its stderr go to ``stage``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=Path(__file__).resolve().parent.parent)
    lines: queue.Queue = queue.Queue()
    tail: list[str] = []
    out_box: list[str] = []
    readers = [threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr], daemon=True),
               threading.Thread(target=lambda: out_box.append(proc.stdout.read()), daemon=True)]
    for t in readers:
        t.start()
    timed_out = False
    while proc.poll() is None or not lines.empty():
        if time.perf_counter() - t0 > timeout and proc.poll() is None:
            proc.kill()
            timed_out = True
        try:
            line = lines.get(timeout=0.2).rstrip()
        except queue.Empty:
            continue
        if line.startswith(_STAGE):
            stage(line[len(_STAGE):])
        elif line.strip():
            tail = (tail + [line])[-15:]
    proc.wait()
    for t in readers:
        t.join(timeout=10)
    found = [x for x in (out_box[0] if out_box else "").splitlines() if x.startswith(_ROW)]
    why = f"timed out after {timeout:.0f} s" if timed_out else f"exit status {proc.returncode}"
    return (json.loads(found[-1][len(_ROW):]) if found else None), why, tail


def bench_model(name: str, args: argparse.Namespace, stage: Callable[[str], None]) -> dict[str, Any]:
    """One model's row from its child (or the error it ended with); then, where ``--kernel-profile`` asks for it,
    per-kernel times from a second child (same caches, so nothing compiles twice)."""
    folder = None if args.warm_caches else Path(tempfile.mkdtemp(prefix=f"tgpeer-{name}-"))
    env = _cache_env(folder)
    base = [sys.executable, "-m", "benchmarks.tinygrad_peer", "--child", name, "--models-dir", args.models_dir,
            "--seed", str(args.seed)]
    t0 = time.perf_counter()
    try:
        row, why, tail = run_child(base + ["--rounds", str(args.rounds), "--block", str(args.block), "--pause",
                                           str(args.pause)] + (["--no-vulkan"] if args.no_vulkan else [])
                                   + (["--no-webgpu"] if args.no_webgpu else []), env, args.model_timeout, stage)
        if row is None:
            return {"model": name, "error": f"child process: {why}", "stderr_tail": tail,
                    "child_s": time.perf_counter() - t0}
        row.update(child_s=time.perf_counter() - t0, loadavg_after=os.getloadavg())
        ratio = row.get("ratios", {}).get(pair_name("opencl:0", "CL"), {}).get("ratio")
        if args.kernel_profile == "all" or (args.kernel_profile == "slower" and ratio is not None and ratio > 1):
            kernels, why, tail = run_child(base + ["--kernels"], {**env, "DEVICELAYER_PROFILE": "1"},
                                           args.model_timeout, stage)
            row["kernel_profile"] = kernels if kernels is not None else {"error": why, "stderr_tail": tail}
        return row
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def _versions() -> dict[str, Any]:
    import numpy as np
    import onnxruntime as ort
    import pyopencl

    def deb(pkg: str) -> str | None:
        try:
            return subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True, text=True,
                                  timeout=10).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            return None

    from importlib.metadata import version

    try:
        dawn = version("dawn-python")
    except Exception:  # noqa: BLE001 - not installed
        dawn = None
    return {"tinygrad": version("tinygrad"), "dawn_python": dawn, "dawn_library": dawn_library(),
            "onnxruntime": ort.__version__, "onnx": version("onnx"),
            "numpy": np.__version__, "pyopencl": pyopencl.VERSION_TEXT, "python": platform.python_version(),
            "pocl": deb("pocl-opencl-icd"), "mesa_vulkan_drivers": deb("mesa-vulkan-drivers"),
            "ocl_icd": deb("ocl-icd-libopencl1")}


def _cell(row: dict[str, Any], name: str, key: str, fmt: str) -> str:
    value = row.get("contestants", {}).get(name, {}).get(key)
    return "-" if value is None else format(value, fmt)


def table(rows: list[dict[str, Any]], lineup: Lineup) -> Any:
    """The rich table: ms per run, ratios, largest relative differences, cold-start seconds."""
    from rich.table import Table

    names, pairs = lineup.names(), lineup.pairs()
    short = " ".join(n.split()[-1].split(":")[0] for n in names)
    t = Table(title="devicelayer vs tinygrad on PoCL / lavapipe (ms per run, medians; ratio < 1: devicelayer faster)")
    t.add_column("model")
    for n in names:
        t.add_column(("dl " if n.startswith("devicelayer") else "tg ") + n.split()[-1] + " ms", justify="right")
    for a, b in pairs:
        t.add_column(f"{a.split(':')[0]} / {b}", justify="right")
    t.add_column(f"max rel diff ({short})", justify="right")
    t.add_column(f"ready s ({short})", justify="right")
    for r in rows:
        if "error" in r:
            t.add_row(r["model"], *[""] * (len(names) + len(pairs)), r["error"][:40], "")
            continue
        ratios = r.get("ratios", {})
        t.add_row(r["model"], *[_cell(r, n, "ms", ".2f") for n in names],
                  *[_ratio_cell(ratios.get(pair_name(a, b))) for a, b in pairs],
                  " ".join(_cell(r, n, "max_rel_diff", ".0e") for n in names),
                  " ".join(_cell(r, n, "ready_s", ".1f") for n in names))
    return t


def kernel_table(rows: list[dict[str, Any]]) -> Any:
    """Where devicelayer's opencl:0 time goes against tinygrad's CL: kernel time, launches, largest kernels."""
    from rich.table import Table

    t = Table(title="OpenCL kernel time of one run (ms, from event timestamps): devicelayer opencl:0 vs tinygrad CL")
    for col in ("model", "dl kernel ms", "dl launches", "tg kernel ms", "tg launches",
                "dl largest kernels (ms, launches)"):
        t.add_column(col, justify="left" if col.startswith(("model", "dl largest")) else "right")
    for r in rows:
        prof = r.get("kernel_profile")
        if not prof:
            continue
        ours, theirs = prof.get("devicelayer opencl:0", {}), prof.get("tinygrad CL", {})
        top = ", ".join(f"{k['kernel']} {k['ms']:.1f} ({k['launches']})" for k in ours.get("by_kernel", [])[:3])
        t.add_row(r["model"], f"{ours.get('kernel_ms', float('nan')):.1f}", str(ours.get("launches", "-")),
                  f"{theirs.get('kernel_ms', float('nan')):.1f}", str(theirs.get("launches", "-")),
                  top or str(ours.get("error", prof.get("error", "")))[:80])
    return t


def _ratio_cell(v: dict[str, float] | None) -> str:
    return "-" if v is None else f"{v['ratio']:.2f} [{v['min']:.2f}-{v['max']:.2f}]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-dir", default="/work/models", help="folder of NAME.onnx files")
    ap.add_argument("--model", action="append", help=f"model name (repeatable; default {', '.join(MODELS)})")
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    ap.add_argument("--block", type=float, default=0.4, help="seconds of calls in a block (default 0.4)")
    ap.add_argument("--pause", type=float, default=0.05, help="seconds of idle before each block (default 0.05)")
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000, help="input seed (default: fresh)")
    ap.add_argument("--no-vulkan", action="store_true", help="leave out devicelayer on vulkan:0")
    ap.add_argument("--no-webgpu", action="store_true", help="leave out tinygrad's WEBGPU (Dawn on Vulkan)")
    ap.add_argument("--warm-caches", action="store_true", help="keep the kernel caches on disk (default: empty)")
    ap.add_argument("--model-timeout", type=float, default=300.0, help="seconds one model's child may take")
    ap.add_argument("--out", default=str(RESULTS), help="folder of the JSON results")
    ap.add_argument("--tag", default="", help="name part of the JSON file")
    ap.add_argument("--kernel-profile", choices=["slower", "all", "none"], default="slower",
                    help="per-kernel times of opencl:0 and CL, in a second child per model: where devicelayer was "
                         "slower (default), for every model, or none")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--kernels", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child_main(args)

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from benchmarks.common import write_result

    console = Console(width=160)
    lineup = Lineup(not args.no_vulkan, not args.no_webgpu)
    models = args.model or MODELS
    rows, load_start = [], os.getloadavg()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        task = progress.add_task("models", total=len(models))
        for name in models:
            row = bench_model(name, args, lambda s, n=name: progress.update(task, description=f"{n}: {s}"))
            rows.append(row)
            progress.console.print(_line(row), highlight=False, markup=False)
            progress.advance(task)
    console.print(table(rows, lineup))
    if any("kernel_profile" in r for r in rows):
        console.print(kernel_table(rows))
    fields = {"rounds": args.rounds, "block_s": args.block, "pause_s": args.pause, "seed": args.seed,
              "cold_caches": not args.warm_caches, "machine_info": platform.platform(),
              "cpus_in_machine": os.cpu_count(), "loadavg_start": load_start, "loadavg_end": os.getloadavg(),
              "versions": _versions(), "rows": rows}
    path = write_result(args.out, f"tinygrad-peer{'-' + args.tag if args.tag else ''}", fields)
    console.print(f"wrote {path}")
    return 0


def _line(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"{r['model']}: {r['error']} {' | '.join(r.get('stderr_tail', [])[-3:])}"
    parts = [f"{n} {c['ms']:.2f} ms" for n, c in r["contestants"].items() if "ms" in c]
    parts += [f"{n} {v['ratio']:.2f}" for n, v in r.get("ratios", {}).items()]
    parts += [f"{n} failed: {e[:80]}" for n, e in r.get("errors", {}).items()]
    return f"{r['model']}: " + ", ".join(parts) + f" ({r['child_s']:.0f} s)"


if __name__ == "__main__":
    raise SystemExit(main())

"""Kernel shapes of products and convolutions per device: each micro-tile edge of the tiled kernels and the
register-blocked kernels forced (``tiles.REGISTER``, column "register"), the static rule's shape and the shape tuning
keeps (``devicelayer.kernels.tile_tuning``); float32 GEMMs also against cuBLAS through CuPy in the same process
where a CUDA device is present.

    python -m benchmarks.tile_tuning [--device ID ...] [--gemm N ...] [--conv NAME ...] [--batch B] [--out DIR]

Times are per call of the op's plan on device-resident scratch tensors, back-to-back calls then one wait (the
median of ``--rounds``); the ratio is the peer's time over devicelayer's (above 1: devicelayer faster).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

import numpy as np

import devicelayer as dl
from devicelayer.kernels import tile_tuning, tiles
from devicelayer.kernels.op import TensorType, get
from devicelayer.kernels.runner import execute, plan_for, programs
from devicelayer.ops import names  # noqa: F401  (registers the op library)

from benchmarks.common import write_result

#: ResNet-50's and MobileNetV2's convolutions (input channels, size, output channels, kernel, stride, groups) by name
CONVS = {
    "r50-3x3-64": (64, 56, 64, 3, 1, 1), "r50-3x3-128": (128, 28, 128, 3, 1, 1), "r50-3x3-256": (256, 14, 256, 3, 1, 1),
    "r50-3x3-512": (512, 7, 512, 3, 1, 1), "r50-1x1-256-64": (256, 56, 64, 1, 1, 1),
    "r50-1x1-1024-256": (1024, 14, 256, 1, 1, 1), "r50-stem-7x7": (3, 224, 64, 7, 2, 1),
    "mnv2-1x1-144-24": (144, 56, 24, 1, 1, 1), "mnv2-1x1-960-160": (960, 7, 160, 1, 1, 1),
    "mnv2-dw-144": (144, 56, 144, 3, 1, 144), "mnv2-dw-960": (960, 7, 960, 3, 1, 960),
}
#: the kernel shapes timed: the tiled kernels' micro-tile edges, then the register-blocked kernels
SHAPES = (*tiles.MICRO_EDGES, tiles.REGISTER)


def _case_gemm(n: int) -> tuple[str, str, list[TensorType], dict[str, Any], float]:
    f32 = np.dtype(np.float32)
    return f"gemm {n}^3", "matmul", [TensorType((n, n), f32), TensorType((n, n), f32)], {}, 2.0 * n ** 3


def _case_conv(name: str, batch: int) -> tuple[str, str, list[TensorType], dict[str, Any], float]:
    c, size, m, k, s, g = CONVS[name]
    f32 = np.dtype(np.float32)
    pad = k // 2
    out = (size + 2 * pad - k) // s + 1
    ins = [TensorType((batch, c, size, size), f32), TensorType((m, c // g, k, k), f32), TensorType((m,), f32)]
    attrs = {"strides": [s, s], "pads": [pad] * 4, "group": g}
    return f"{name} b{batch}", "conv", ins, attrs, 2.0 * batch * m * out * out * (c // g) * k * k


def _per_call(call: Callable[[], Any], rounds: int, budget: float) -> float:
    """Median seconds per call over ``rounds`` rounds of back-to-back calls (each round about ``budget``)."""
    call().wait()
    t0 = time.perf_counter()
    call().wait()
    once = max(time.perf_counter() - t0, 1e-6)
    reps = max(1, min(50, int(budget / once)))
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps - 1):
            call()
        call().wait()
        times.append((time.perf_counter() - t0) / reps)
    return statistics.median(times)


def _devicelayer(dev: Any, op_name: str, ins: list[TensorType], attrs: dict[str, Any], rounds: int,
                 budget: float) -> dict[str, Any]:
    """Seconds per call with each kernel shape forced (the tiled edges, and the register-blocked kernels); the
    static and kept shapes."""
    op = get(op_name)
    attrs, outs = op.prepare(ins, attrs)
    replan = lambda: plan_for(op, dev, ins, outs, attrs)  # noqa: E731
    static = tile_tuning.edge_of(replan())
    rng = np.random.default_rng(0)
    bufs = []
    for t in ins:
        buf = dev.pool.allocate(t.size * 4, t.dtype)
        dev.pool.upload(buf, rng.standard_normal(t.shape).astype(t.dtype)).wait()
        bufs.append(buf)
    out = dev.pool.allocate(outs[0].size * 4, outs[0].dtype)
    times: dict[int, float] = {}
    try:
        for edge in SHAPES:
            plan = tile_tuning.forced_plan(replan, edge)
            if tile_tuning.edge_of(plan) != edge:
                continue  # (the device's shared memory does not take the edge; no register form: a vendor op)
            temps = [dev.pool.allocate(max(t.size * t.dtype.itemsize, 4), t.dtype) for t in plan.temps]
            compiled = programs(op, dev, plan, ins, outs, attrs)
            times[edge] = _per_call(lambda: execute(op, dev, plan, ins, outs, attrs, bufs, [out], temps, [], compiled),
                                    rounds, budget)
            for t in temps:
                dev.pool.free(t)
    finally:
        for b in [*bufs, out]:
            dev.pool.free(b)
    return {"static": static, "kept": tile_tuning.choose(times, static), "times": times}


def _cublas(dev: Any, n: int, rounds: int, budget: float) -> float:
    import cupy

    class _Done:
        def __init__(self, stream: Any) -> None:
            self.stream = stream

        def wait(self) -> None:
            self.stream.synchronize()

    with cupy.cuda.Device(dev.info.index):
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            a = cupy.random.standard_normal((n, n), dtype=np.float32)
            b = cupy.random.standard_normal((n, n), dtype=np.float32)
            c = cupy.empty((n, n), np.float32)

            def call() -> _Done:
                cupy.matmul(a, b, out=c)
                return _Done(stream)
            return _per_call(call, rounds, budget)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", action="append", help="device id (repeatable; default every kernel device)")
    ap.add_argument("--gemm", action="append", type=int, help="square GEMM size (repeatable; default 1024 2048 4096)")
    ap.add_argument("--conv", action="append", choices=sorted(CONVS), help="convolution (repeatable; default all)")
    ap.add_argument("--batch", type=int, default=16, help="convolution batch on GPUs (CPU devices: 1)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--budget", type=float, default=0.3, help="seconds per round")
    ap.add_argument("--out", help="folder for the JSON result (default benchmarks/results)")
    args = ap.parse_args(argv)
    from rich.console import Console
    from rich.table import Table

    devices = [dl.device(i) for i in args.device] if args.device else [
        d for d in dl.devices() if d.info.kernel_language != "python"]
    cuda = next((d for d in dl.devices() if d.info.backend == "cuda"), None)
    rows = []
    for dev in devices:
        batch = 1 if dev.info.device_type == "cpu" else args.batch
        cases = [_case_gemm(n) for n in (args.gemm or [1024, 2048, 4096])]
        cases += [_case_conv(name, batch) for name in (args.conv or list(CONVS))]
        for label, op_name, ins, attrs, flops in cases:
            try:
                got = _devicelayer(dev, op_name, ins, attrs, args.rounds, args.budget)
            except dl.DeviceLayerError as exc:
                rows.append({"device": dev.id, "case": label, "error": f"{type(exc).__name__}: {exc}"})
                continue
            times = got["times"]
            row = {"device": dev.id, "name": dev.info.name, "case": label, "static": got["static"],
                   "kept": got["kept"], "ms": {str(e): t * 1e3 for e, t in times.items()},
                   "tflops_kept": flops / times[got["kept"]] / 1e12 if got["kept"] in times else None,
                   "kept_over_static": (times[got["static"]] / times[got["kept"]]
                                        if got["static"] in times and got["kept"] in times else None)}
            if cuda is not None and op_name == "matmul" and got["kept"] in times:
                peer = _cublas(cuda, ins[0].shape[0], args.rounds, args.budget)
                row.update(peer="cuBLAS (CuPy)", peer_ms=peer * 1e3, ratio_kept=peer / times[got["kept"]],
                           ratio_static=peer / times[got["static"]] if got["static"] in times else None)
            rows.append(row)
            print(row, flush=True)
    table = Table(title="products and convolutions: ms per call by kernel shape (tiled edges 2: 32x32, 4: 64x64, "
                        "8: 128x128 tiles; 0: register-blocked)")
    for col in ("device", "case", "edge 2", "edge 4", "edge 8", "register", "static", "kept", "kept/static", "TFLOP/s",
                "cuBLAS ms", "ratio"):
        table.add_column(col)
    for r in rows:
        if "error" in r:
            table.add_row(r["device"], r["case"], r["error"][:60])
            continue
        fmt = lambda v, f="{:.3f}": "" if v is None else f.format(v)  # noqa: E731
        table.add_row(r["device"], r["case"], *(fmt(r["ms"].get(str(e))) for e in SHAPES),
                      str(r["static"]), str(r["kept"]), fmt(r["kept_over_static"], "{:.2f}x"),
                      fmt(r["tflops_kept"], "{:.2f}"), fmt(r.get("peer_ms")), fmt(r.get("ratio_kept"), "{:.2f}"))
    Console(width=160).print(table)
    path = write_result(args.out or "benchmarks/results", "tile-tuning", {"rows": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""GPU time of each recorded item of a model's plan on a CUDA device: where a run's time goes.

    python -m benchmarks.cuda_item_times MODEL.onnx [--device cuda:0] [--batch N] [--repeat 5] [--top 25]
                                         [--out DIR]
    python -m benchmarks.cuda_item_times --arch resnet50 --dtype float16 --batch 16 ...

The plan is compiled and run once (its recordings made), then every item of every CUDA segment is enqueued
again, one by one, on a stream held back by a spinning kernel, with an event after each: so the launches queue
up before the GPU starts and each item's time is GPU time alone, as in a replayed CUDA graph. Items are summed
by op (from their labels) and listed by time; the whole replayed graph is timed too, for comparison.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from typing import Any

import numpy as np

from benchmarks.common import write_result

_SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""


def item_times(plan: Any, repeat: int) -> tuple[list[tuple[str, str, float]], float]:
    """(label, op, median ms) per CUDA item in run order, and the median ms of replaying the segments' graphs."""
    import cupy

    inner = plan._plans()[0] if hasattr(plan, "_plans") else plan  # a model's plan of the shapes last run
    prepared = inner._prepared
    segments = [w for w in prepared.replay.work if hasattr(w, "recording") and w.recording is not None
                and w.device.id.startswith("cuda")]
    spin = cupy.RawKernel(_SPIN, "spin")
    samples: dict[int, list[float]] = {}
    labels: list[tuple[str, str]] = []
    graph_ms: list[float] = []
    for rep in range(repeat):
        for seg in segments:
            dev = seg.device
            with dev.cu_device:
                stream = cupy.cuda.Stream(non_blocking=True)
                items = seg.recording.items
                events = [cupy.cuda.Event() for _ in range(len(items) + 1)]
                spin((1,), (1,), (np.int64(50_000_000),), stream=stream)  # ~25 ms: launches queue behind it
                events[0].record(stream)
                for k, item in enumerate(items):
                    dev.enqueue_item(item, stream)
                    events[k + 1].record(stream)
                stream.synchronize()
                for k, item in enumerate(items):
                    key = id(seg) * 100000 + k
                    samples.setdefault(key, []).append(cupy.cuda.get_elapsed_time(events[k], events[k + 1]))
                    if rep == 0:
                        m = re.search(r"\((\w+)\)\s*$", item.label)
                        describe = getattr(item.fn, "describe", None) if item.kind == "call" else None
                        detail = f"  [{describe(*item.call_args[:3])}]" if describe is not None else ""
                        labels.append((item.label + detail, m.group(1) if m else item.kind))
                start, end = cupy.cuda.Event(), cupy.cuda.Event()
                spin((1,), (1,), (np.int64(50_000_000),), stream=stream)
                start.record(stream)
                seg.recording.native.graph.launch(stream)
                end.record(stream)
                end.synchronize()
                graph_ms.append(cupy.cuda.get_elapsed_time(start, end))
    rows = [(label, op, statistics.median(v)) for (label, op), v in zip(labels, samples.values())]
    return rows, statistics.median(graph_ms)


def _model(args: argparse.Namespace) -> tuple[bytes, dict[str, np.ndarray]]:
    if args.model:
        import onnx

        model = onnx.load(args.model)
        feeds = {}
        init = {i.name for i in model.graph.initializer}
        rng = np.random.default_rng(0)
        for inp in model.graph.input:
            if inp.name in init:
                continue
            dims = [d.dim_value if d.dim_value > 0 else args.batch for d in inp.type.tensor_type.shape.dim]
            elem = onnx.helper.tensor_dtype_to_np_dtype(inp.type.tensor_type.elem_type)
            feeds[inp.name] = (rng.standard_normal(dims).astype(elem) if elem.kind == "f"
                               else rng.integers(0, 100, dims).astype(elem))
        return model.SerializeToString(), feeds
    import torch

    from benchmarks.gpu_vs_torch import _arch, _batched, _checked, _export, _float16_converted

    module, example, names = _arch(args.arch).build()
    example = _batched(example, args.batch, torch)
    tdtype = getattr(torch, args.dtype)
    module = module.cuda().eval().to(tdtype) if args.dtype != "float32" else module.cuda().eval()
    example = tuple(x.to(tdtype) if x.is_floating_point() else x for x in example)
    with torch.no_grad():
        data = _export(module, tuple(x.cuda() for x in example), names)
        if args.dtype == "float16" and _checked(data) is not None:
            # (the export gpu_vs_torch falls back on: a half transformer's mixed-type LayerNormalization)
            data = _float16_converted(module, tuple(x.cuda() for x in example), names)
    return data, {n: x.numpy() for n, x in zip(names, example)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", help="ONNX file (or --arch)")
    ap.add_argument("--arch", help="benchmarks.gpu_vs_torch model name, exported with random weights")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--profile", action="store_true", help="cProfile 200 runs from host NumPy to host NumPy")
    ap.add_argument("--out", help="folder for the JSON result")
    args = ap.parse_args(argv)
    import devicelayer as dl
    from devicelayer.onnx import load

    data, feeds = _model(args)
    t0 = time.perf_counter()
    plan = load(data).compile([dl.device(args.device)])
    plan.run_numpy(feeds)
    compile_s = time.perf_counter() - t0
    rows, graph_ms = item_times(plan, args.repeat)
    total = sum(ms for _, _, ms in rows)
    by_op: dict[str, list[float]] = {}
    for _, op, ms in rows:
        by_op.setdefault(op, []).append(ms)
    name = args.model or f"{args.arch} {args.dtype} b{args.batch}"
    print(f"{name} on {args.device}: {len(rows)} items, sum {total:.3f} ms, replayed graph {graph_ms:.3f} ms, "
          f"compile + first run {compile_s:.1f} s")
    print("by op:")
    for op, v in sorted(by_op.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {op:28s} {len(v):4d} items {sum(v):9.3f} ms  ({100 * sum(v) / max(total, 1e-9):5.1f}%)")
    print(f"largest {args.top} items:")
    for label, op, ms in sorted(rows, key=lambda r: -r[2])[:args.top]:
        print(f"  {ms:8.3f} ms  {label}")
    wall = [0.0] * 50
    for k in range(len(wall)):
        t0 = time.perf_counter()
        plan.run_numpy(feeds)
        wall[k] = (time.perf_counter() - t0) * 1e3
    print(f"run_numpy: median {statistics.median(wall):.3f} ms (inputs from and outputs to host NumPy)")
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        for _ in range(200):
            plan.run_numpy(feeds)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    if args.out:
        write_result(args.out, "cuda-item-times", {"model": name, "device": args.device, "items": rows,
                                                    "sum_ms": total, "graph_ms": graph_ms, "compile_s": compile_s,
                                                    "run_numpy_ms": statistics.median(wall)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``devicelayer run MODEL.onnx``: run an ONNX model on one device, every device, or spread over all.

    devicelayer run model.onnx --device opencl:0 --input x=x.npy --check --repeat 20 --json
    devicelayer run --bundled tiny_cnn --device all --check

Inputs come from .npy or .npz files (``--input NAME=FILE.npy``; an .npz holding one array or one named
NAME) or are random (seeded, ``--seed``); an input
with symbolic dimensions takes ``--shape NAME=D0,D1,...`` (or the .npy's shape, or 1 per symbolic
dimension).  Several ``--shape`` for one input run the model at each (``--shape x=1,3,224,224 --shape
x=8,3,224,224``): one loaded model, one plan per device, a row per signature.  ``--device`` is a
device id, ``auto`` (one plan placed over every device, in preference order) or ``all`` (one plan
per device, outputs compared between them).  ``--check`` compares every device with onnxruntime.
``--save-outputs PATH`` and ``--trace PATH`` write exactly PATH (nothing is appended), whole or not at all;
a path that cannot be written is refused before anything runs.  Exit status: 0 when every run (and check)
succeeded, 1 when a check failed or a device failed, 2 on bad usage, a model that cannot be loaded, or a file
that cannot be read or written.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

JSON_SCHEMA = "devicelayer.run/1"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``run`` subcommand to ``subparsers`` (from ``parser.add_subparsers()``)."""
    p = subparsers.add_parser("run", help="run an ONNX model on devices; time it, check it against onnxruntime",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(p)
    return p


def configure(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("model", nargs="?", help="path of an .onnx file")
    p.add_argument("--bundled", metavar="NAME", help="a model shipped with devicelayer instead (tiny_cnn)")
    p.add_argument("--device", default="auto", help="device id, 'auto' (default) or 'all'")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                   help="an input from an .npy, or an .npz holding one array or one named NAME (repeatable)")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,..",
                   help="shape of an input with dynamic dimensions (repeatable)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--save-outputs", metavar="FILE.npz",
                   help="save the outputs as an .npz at exactly this path (with --device all: DEVICE/NAME)")
    p.add_argument("--check", action="store_true", help="compare with onnxruntime (CPU)")
    p.add_argument("--tolerance", type=float, default=1e-4,
                   help="largest |error| / max|reference| a check accepts (default 1e-4)")
    p.add_argument("--repeat", type=int, default=1, metavar="N", help="timed runs after one warm-up (default 1)")
    p.add_argument("--trace", metavar="FILE.json", help="write a Chrome/Perfetto trace of one profiled run")
    p.add_argument("--json", action="store_true", help=f"print a JSON report (schema {JSON_SCHEMA})")
    p.add_argument("--no-fuse", action="store_true",
                   help="run the model node by node as written (no fused kernels), to compare or debug")
    return p


class UsageError(Exception):
    pass


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise UsageError(f"{what} must look like NAME=VALUE, got {item!r}")
        out[name] = value
    return out


def _shape_sets(args: argparse.Namespace) -> list[dict[str, tuple[int, ...]]]:
    """The ``--shape`` options as signatures of input shapes: an input given several shapes runs at each; inputs
    given one keep it in every signature."""
    given: dict[str, list[tuple[int, ...]]] = {}
    for item in args.shape:
        name, sep, dims = item.partition("=")
        if not sep or not name or not dims:
            raise UsageError(f"--shape must look like NAME=D0,D1,..., got {item!r}")
        try:
            shape = tuple(int(d) for d in dims.split(","))
        except ValueError:
            raise UsageError(f"--shape {name}={dims}: dimensions must be integers separated by commas") from None
        if any(d < 0 for d in shape):
            raise UsageError(f"--shape {name}={dims}: dimensions must be >= 0")
        given.setdefault(name, []).append(shape)
    count = max((len(v) for v in given.values()), default=1)
    for name, shapes in given.items():
        if len(shapes) not in (1, count):
            raise UsageError(f"--shape gives {name!r} {len(shapes)} shapes and another input {count}: give each "
                             f"input one shape or {count}")
    return [{name: shapes[k if len(shapes) > 1 else 0] for name, shapes in given.items()} for k in range(count)]


def _inputs(model: Any, args: argparse.Namespace) -> list[dict[str, np.ndarray]]:
    """One set of feeds per signature of input shapes (``--shape``): ``--input`` files, else random arrays of the
    given shape (or the declared one, symbolic dimensions 1)."""
    from .casting import to_dtype
    from .cli_files import read_array
    from .dtypes import EXTRA
    from .errors import DeviceLayerError
    from .onnx.loader import np_dtype
    from .onnx.testing import random_array
    from onnx import helper

    files = _pairs(args.input, "--input")
    sets = _shape_sets(args)
    inits = {i.name for i in model.graph.initializer}
    declared = [vi for vi in model.graph.input if vi.name not in inits]
    known = {vi.name for vi in declared}
    for name in list(files) + [n for s in sets for n in s]:
        if name not in known:
            raise UsageError(f"the model has no input {name!r}; its inputs are {sorted(known)}")
    loaded: dict[str, np.ndarray] = {}
    for vi in declared:
        if vi.name not in files:
            continue
        where = f"--input {vi.name}={files[vi.name]}"
        arr = read_array(files[vi.name], vi.name, where)
        try:
            dt = np_dtype(vi.type.tensor_type.elem_type)
            if arr.dtype.kind in "USV" and arr.dtype.name not in EXTRA:
                raise UsageError(f"{where}: holds {arr.dtype}, which does not convert to the model's {dt}")
            loaded[vi.name] = np.ascontiguousarray(to_dtype(arr, dt, where))
        except DeviceLayerError as exc:
            raise UsageError(f"{where}: {exc}" if not str(exc).startswith(where) else str(exc)) from None
    feeds_per_set = []
    for shapes in sets:
        rng = np.random.default_rng(args.seed)
        feeds = {}
        for vi in declared:
            if vi.name in loaded:
                feeds[vi.name] = loaded[vi.name]
                continue
            tt = vi.type.tensor_type
            dt = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
            shape = shapes.get(vi.name) or tuple(d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim)
            feeds[vi.name] = random_array(rng, shape, dt)
        feeds_per_set.append(feeds)
    return feeds_per_set


def _time(plan: Any, feeds: dict[str, np.ndarray], repeat: int, label: str, progress: Any) -> tuple[dict, list]:
    outputs = plan(**feeds)  # warm-up (and the outputs)
    times = []
    task = progress.add_task(label, total=repeat) if progress is not None else None
    for _ in range(repeat):
        t0 = time.perf_counter()
        plan(**feeds)
        times.append(time.perf_counter() - t0)
        if task is not None:
            progress.advance(task)
    return outputs, times


def main(args: argparse.Namespace) -> int:
    """Run the subcommand; returns the exit status."""
    from .cli_files import FileError

    try:
        return _main(args)
    except (UsageError, FileError) as exc:
        print(f"devicelayer run: {exc}", file=sys.stderr)
        return 2


def _main(args: argparse.Namespace) -> int:
    from .cli_files import check_writable, write_whole
    from .graph.profile import trace_document
    from .errors import DeviceLayerError
    from .registry import device as find, devices

    if (args.model is None) == (args.bundled is None):
        raise UsageError("give a MODEL path or --bundled NAME (one of them)")
    if args.repeat < 0:
        raise UsageError("--repeat must be >= 0")
    if not (math.isfinite(args.tolerance) and args.tolerance >= 0):
        raise UsageError(f"--tolerance must be a finite number >= 0, got {args.tolerance}")
    for flag, target in (("--save-outputs", args.save_outputs), ("--trace", args.trace)):
        if target:
            check_writable(target, flag)
    try:
        import onnx  # noqa: F401
    except ImportError:
        raise UsageError("devicelayer run needs the 'onnx' package (pip install onnx)") from None
    from .onnx import bundled, load, read_model
    from .onnx.testing import scaled_error

    try:
        path = bundled(args.bundled) if args.bundled else args.model
        model = read_model(Path(path))
    except DeviceLayerError as exc:
        raise UsageError(str(exc)) from None
    feed_sets = _inputs(model, args)
    try:
        graph = load(model)
    except DeviceLayerError as exc:
        raise UsageError(f"cannot load {path}: {type(exc).__name__}: {exc}") from None
    from .graph.dynamic import check_inputs

    for feeds in feed_sets:
        try:
            check_inputs(graph.inputs, feeds)
        except DeviceLayerError as exc:
            raise UsageError(str(exc)) from None

    if args.device == "all":
        targets = [(d.id, [d.id]) for d in devices()]
    elif args.device == "auto":
        targets = [("auto", "auto")]
    else:
        try:
            targets = [(find(args.device).id, [args.device])]
        except DeviceLayerError as exc:
            raise UsageError(str(exc)) from None
    if not targets:
        raise UsageError("no device is usable (see devicelayer info)")

    references: list[Any] = [None] * len(feed_sets)
    if args.check:
        try:
            from .onnx.testing import onnxruntime_run

            references = [onnxruntime_run(model, feeds) for feeds in feed_sets]
        except ImportError:
            raise UsageError("--check needs onnxruntime (pip install onnxruntime)") from None

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console(stderr=True)
    results: list[dict[str, Any]] = []
    outputs_by: dict[str, dict[str, np.ndarray]] = {}
    traces: list[tuple[Path, list[dict[str, Any]]]] = []  # written once every run is done
    show = args.repeat > 1 and console.is_terminal
    progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                        TimeRemainingColumn(), console=console, transient=True) if show else None
    if progress is not None:
        progress.start()
    try:
        for label, devs in targets:
            try:
                t0 = time.perf_counter()
                plan = graph.compile(devs, fuse=not args.no_fuse)
                compile_s = time.perf_counter() - t0
            except DeviceLayerError as exc:
                results.append({"device": label, "error": f"{type(exc).__name__}: {exc}"})
                continue
            for k, (feeds, reference) in enumerate(zip(feed_sets, references)):
                entry: dict[str, Any] = {"device": label, "compile_s": compile_s,
                                         "shapes": {n: list(v.shape) for n, v in feeds.items()}}
                key = label if len(feed_sets) == 1 else f"{label} {_signature(feeds)}"
                try:
                    t0 = time.perf_counter()
                    outputs, times = _time(plan, feeds, args.repeat, f"{key}: {args.repeat} runs", progress)
                    entry["first_run_s"] = time.perf_counter() - t0 - sum(times)
                    entry["latency_ms"] = ({"median": statistics.median(times) * 1e3, "min": min(times) * 1e3}
                                           if times else None)
                    counts: dict[str, int] = {}
                    for row in plan.placement_table():
                        counts[row["device"]] = counts.get(row["device"], 0) + 1
                    entry["placement"] = counts
                    entry["transfers"] = plan.transfers
                    entry["kernels"] = plan.kernel_counts()
                    entry["memory"] = plan.memory_report()
                    entry["specialisations"] = plan.cache_info()
                    if args.trace:
                        plan(profile=True, **feeds)
                        trace = Path(args.trace)
                        if len(targets) > 1 or len(feed_sets) > 1:
                            suffix = label.replace(":", "_") + (f".{k}" if len(feed_sets) > 1 else "")
                            trace = trace.with_name(f"{trace.stem}.{suffix}{trace.suffix}")
                        traces.append((trace, list(plan.last_profile or [])))
                        entry["trace"] = str(trace)
                    outputs_by[key] = outputs
                    entry["outputs"] = {n: {"shape": list(v.shape), "dtype": str(v.dtype)} for n, v in outputs.items()}
                    if reference is not None:
                        errs = {n: scaled_error(outputs[n], reference[n]) for n in reference}
                        entry["check"] = {"reference": "onnxruntime", "errors": errs,
                                          "ok": all(e <= args.tolerance for e in errs.values())}
                except (DeviceLayerError, OSError) as exc:
                    entry["error"] = f"{type(exc).__name__}: {exc}"
                results.append(entry)
            plan.release()
    finally:
        if progress is not None:
            progress.stop()

    if len(targets) > 1:  # --device all: every device against the first that ran, signature by signature
        for k, feeds in enumerate(feed_sets):
            keys = [label if len(feed_sets) == 1 else f"{label} {_signature(feeds)}" for label, _ in targets]
            ran = [key for key in keys if key in outputs_by]
            if not ran:
                continue
            first, base = ran[0], outputs_by[ran[0]]
            for entry in results:
                key = entry["device"] if len(feed_sets) == 1 else f"{entry['device']} {_signature(feeds)}"
                if key in outputs_by and key != first and entry.get("shapes") == {n: list(v.shape) for n, v in
                                                                                   feeds.items()}:
                    errs = {n: scaled_error(outputs_by[key][n], base[n]) for n in base}
                    entry["agreement"] = {"with": first.split(" ")[0], "errors": errs,
                                          "ok": all(e <= args.tolerance for e in errs.values())}
    for trace, profile in traces:
        document = json.dumps(trace_document(profile)).encode()
        write_whole(trace, "--trace", lambda fh, document=document: fh.write(document))
    if args.save_outputs and outputs_by:
        if len(outputs_by) == 1:
            arrays = next(iter(outputs_by.values()))
        else:
            arrays = {f"{d.replace(' ', '/')}/{k}": v for d, outs in outputs_by.items() for k, v in outs.items()}
        write_whole(args.save_outputs, "--save-outputs", lambda fh: np.savez(fh, **arrays))

    ok = all("error" not in e and e.get("check", {}).get("ok", True) and e.get("agreement", {}).get("ok", True)
             for e in results)
    if args.json:
        doc = {"schema": JSON_SCHEMA, "model": str(path),
               "inputs": {k: list(v.shape) for k, v in feed_sets[0].items()},
               "shape_sets": [{k: list(v.shape) for k, v in feeds.items()} for feeds in feed_sets],
               "repeat": args.repeat, "tolerance": args.tolerance, "devices": results, "ok": ok}
        json.dump(doc, sys.stdout, indent=2, default=float)
        sys.stdout.write("\n")
    else:
        _print(results, path, args)
    return 0 if ok else 1


def _signature(feeds: dict[str, np.ndarray]) -> str:
    """A signature of input shapes in a table cell: ``x=8x3x224x224``."""
    return " ".join(f"{n}={'x'.join(map(str, v.shape)) or 'scalar'}" for n, v in feeds.items())


def _print(results: list[dict[str, Any]], path: Any, args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"devicelayer run {escape(str(path))}")
    several = len({json.dumps(e.get("shapes"), sort_keys=True) for e in results}) > 1
    if several:
        table.add_column("shapes")
    for col in ("device", "median ms", "min ms", "placement", "transfers", "kernels", "peak", "onnxruntime",
                "agreement"):
        table.add_column(col, justify="right" if col in ("median ms", "min ms", "transfers", "kernels", "peak")
                         else "left")

    def verdict(check: dict[str, Any] | None) -> str:
        if not check:
            return "-"
        worst = max(check["errors"].values(), default=0.0)
        return ("[green]ok[/]" if check["ok"] else "[red]FAIL[/]") + f" {worst:.1e}"

    for e in results:
        shapes = [escape(" ".join(f"{n}={'x'.join(map(str, s)) or 'scalar'}" for n, s in e.get("shapes", {}).items()))
                  ] if several else []
        if "error" in e:
            table.add_row(*shapes, escape(e["device"]), "[red]failed[/]", "", "", "", "", "", escape(e["error"][:160]),
                          "")
            continue
        lat = e["latency_ms"]
        agree = e.get("agreement")
        peak = sum(m["peak"] for m in e["memory"].values())
        table.add_row(*shapes, escape(e["device"]), f"{lat['median']:.3f}" if lat else "-", f"{lat['min']:.3f}" if lat else "-",
                      escape(", ".join(f"{d}: {n}" for d, n in e["placement"].items())), str(e["transfers"]),
                      f"{e['kernels']['after']} (of {e['kernels']['before']})", f"{peak / 1024:.0f} KiB",
                      verdict(e.get("check")),
                      (verdict(agree) + f" vs {escape(agree['with'])}") if agree else "-")
    Console().print(table)


def standalone(argv: Any = None) -> int:
    """``python -m devicelayer.cli_run ...`` (until the subcommand is wired into ``devicelayer``)."""
    from .cli import UsageParser, backends_problem

    parser = configure(UsageParser(prog="devicelayer run", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter))
    args = parser.parse_args(argv)
    problem = backends_problem()
    if problem:
        print(f"devicelayer run: {problem}", file=sys.stderr)
        return 2
    return main(args)


if __name__ == "__main__":
    sys.exit(standalone())

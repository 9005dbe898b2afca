"""``devicelayer run MODEL.onnx``: run an ONNX model on one device, every device, or spread over all.

    devicelayer run model.onnx --device opencl:0 --input x=x.npy --check --repeat 20 --json
    devicelayer run --bundled tiny_cnn --device all --check

Inputs come from .npy files (``--input NAME=FILE.npy``) or are random (seeded, ``--seed``);
dynamic dimensions take ``--shape NAME=D0,D1,...`` (or the .npy's shape, or 1).  ``--device`` is a
device id, ``auto`` (one plan placed over every device, in preference order) or ``all`` (one plan
per device, outputs compared between them).  ``--check`` compares every device with onnxruntime.
Exit status: 0 when every run (and check) succeeded, 1 when a check failed or a device failed, 2 on
bad usage or a model that cannot be loaded.
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
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", help="an input (repeatable)")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,..",
                   help="shape of an input with dynamic dimensions (repeatable)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--save-outputs", metavar="FILE.npz", help="save the outputs (with --device all: DEVICE/NAME)")
    p.add_argument("--check", action="store_true", help="compare with onnxruntime (CPU)")
    p.add_argument("--tolerance", type=float, default=1e-4,
                   help="largest |error| / max|reference| a check accepts (default 1e-4)")
    p.add_argument("--repeat", type=int, default=1, metavar="N", help="timed runs after one warm-up (default 1)")
    p.add_argument("--trace", metavar="FILE.json", help="write a Chrome/Perfetto trace of one profiled run")
    p.add_argument("--json", action="store_true", help=f"print a JSON report (schema {JSON_SCHEMA})")
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


def _inputs(model: Any, args: argparse.Namespace) -> tuple[dict[str, np.ndarray], dict[str, tuple[int, ...]]]:
    from .onnx.testing import random_array
    from onnx import helper

    files = _pairs(args.input, "--input")
    shapes: dict[str, tuple[int, ...]] = {}
    for name, dims in _pairs(args.shape, "--shape").items():
        try:
            shapes[name] = tuple(int(d) for d in dims.split(","))
        except ValueError:
            raise UsageError(f"--shape {name}={dims}: dimensions must be integers separated by commas") from None
        if any(d < 0 for d in shapes[name]):
            raise UsageError(f"--shape {name}={dims}: dimensions must be >= 0")
    inits = {i.name for i in model.graph.initializer}
    declared = [vi for vi in model.graph.input if vi.name not in inits]
    known = {vi.name for vi in declared}
    for name in list(files) + list(shapes):
        if name not in known:
            raise UsageError(f"the model has no input {name!r}; its inputs are {sorted(known)}")
    rng = np.random.default_rng(args.seed)
    feeds = {}
    for vi in declared:
        tt = vi.type.tensor_type
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        if vi.name in files:
            try:
                arr = np.load(files[vi.name], allow_pickle=False)
            except (OSError, ValueError) as exc:
                raise UsageError(f"--input {vi.name}: cannot read {files[vi.name]!r}: {exc}") from None
            try:
                feeds[vi.name] = np.ascontiguousarray(arr.astype(dt, copy=False))
            except (TypeError, ValueError) as exc:
                raise UsageError(f"--input {vi.name}: {files[vi.name]!r} holds {arr.dtype}, which does not "
                                 f"convert to the model's {dt}: {exc}") from None
            shapes.setdefault(vi.name, tuple(arr.shape))
            continue
        shape = shapes.get(vi.name) or tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1
                                             for d in tt.shape.dim)
        shapes[vi.name] = tuple(shape)
        feeds[vi.name] = random_array(rng, shape, dt)
    return feeds, shapes


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
    try:
        return _main(args)
    except UsageError as exc:
        print(f"devicelayer run: {exc}", file=sys.stderr)
        return 2


def _main(args: argparse.Namespace) -> int:
    from .errors import DeviceLayerError
    from .registry import device as find, devices

    if (args.model is None) == (args.bundled is None):
        raise UsageError("give a MODEL path or --bundled NAME (one of them)")
    if args.repeat < 0:
        raise UsageError("--repeat must be >= 0")
    if not (math.isfinite(args.tolerance) and args.tolerance >= 0):
        raise UsageError(f"--tolerance must be a finite number >= 0, got {args.tolerance}")
    for flag, target in (("--save-outputs", args.save_outputs), ("--trace", args.trace)):
        folder = Path(target).resolve().parent if target else None
        if folder is not None and not folder.is_dir():
            raise UsageError(f"{flag} {target}: the directory {str(folder)!r} does not exist")
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
    feeds, shapes = _inputs(model, args)
    try:
        graph = load(model, input_shapes=shapes)
    except DeviceLayerError as exc:
        raise UsageError(f"cannot load {path}: {type(exc).__name__}: {exc}") from None

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

    reference = None
    if args.check:
        try:
            from .onnx.testing import onnxruntime_run

            reference = onnxruntime_run(model, feeds)
        except ImportError:
            raise UsageError("--check needs onnxruntime (pip install onnxruntime)") from None

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console(stderr=True)
    results: list[dict[str, Any]] = []
    outputs_by: dict[str, dict[str, np.ndarray]] = {}
    show = args.repeat > 1 and console.is_terminal
    progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                        TimeRemainingColumn(), console=console, transient=True) if show else None
    if progress is not None:
        progress.start()
    try:
        for label, devs in targets:
            entry: dict[str, Any] = {"device": label}
            try:
                t0 = time.perf_counter()
                plan = graph.compile(devs)
                entry["compile_s"] = time.perf_counter() - t0
                outputs, times = _time(plan, feeds, args.repeat, f"{label}: {args.repeat} runs", progress)
                entry["latency_ms"] = ({"median": statistics.median(times) * 1e3, "min": min(times) * 1e3}
                                       if times else None)
                counts: dict[str, int] = {}
                for row in plan.placement_table():
                    counts[row["device"]] = counts.get(row["device"], 0) + 1
                entry["placement"] = counts
                entry["transfers"] = plan.transfers
                entry["memory"] = plan.memory_report()
                if args.trace:
                    plan(profile=True, **feeds)
                    trace = Path(args.trace)
                    if len(targets) > 1:
                        trace = trace.with_name(f"{trace.stem}.{label.replace(':', '_')}{trace.suffix}")
                    plan.trace(trace)
                    entry["trace"] = str(trace)
                plan.release()
                outputs_by[label] = outputs
                entry["outputs"] = {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in outputs.items()}
                if reference is not None:
                    errs = {k: scaled_error(outputs[k], reference[k]) for k in reference}
                    entry["check"] = {"reference": "onnxruntime", "errors": errs,
                                      "ok": all(e <= args.tolerance for e in errs.values())}
            except (DeviceLayerError, OSError) as exc:
                entry["error"] = f"{type(exc).__name__}: {exc}"
            results.append(entry)
    finally:
        if progress is not None:
            progress.stop()

    if len(outputs_by) > 1:  # --device all: every device against the first that ran
        first, base = next(iter(outputs_by.items()))
        for entry in results:
            if entry["device"] in outputs_by and entry["device"] != first:
                errs = {k: scaled_error(outputs_by[entry["device"]][k], base[k]) for k in base}
                entry["agreement"] = {"with": first, "errors": errs,
                                      "ok": all(e <= args.tolerance for e in errs.values())}
    if args.save_outputs and outputs_by:
        if len(outputs_by) == 1:
            arrays = next(iter(outputs_by.values()))
        else:
            arrays = {f"{d}/{k}": v for d, outs in outputs_by.items() for k, v in outs.items()}
        try:
            np.savez(args.save_outputs, **arrays)
        except OSError as exc:
            raise UsageError(f"--save-outputs: cannot write {args.save_outputs!r}: {exc}") from None

    ok = all("error" not in e and e.get("check", {}).get("ok", True) and e.get("agreement", {}).get("ok", True)
             for e in results)
    if args.json:
        doc = {"schema": JSON_SCHEMA, "model": str(path), "inputs": {k: list(v.shape) for k, v in feeds.items()},
               "repeat": args.repeat, "tolerance": args.tolerance, "devices": results, "ok": ok}
        json.dump(doc, sys.stdout, indent=2, default=float)
        sys.stdout.write("\n")
    else:
        _print(results, path, args)
    return 0 if ok else 1


def _print(results: list[dict[str, Any]], path: Any, args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"devicelayer run {escape(str(path))}")
    for col in ("device", "median ms", "min ms", "placement", "transfers", "peak", "onnxruntime", "agreement"):
        table.add_column(col, justify="right" if col in ("median ms", "min ms", "transfers", "peak") else "left")

    def verdict(check: dict[str, Any] | None) -> str:
        if not check:
            return "-"
        worst = max(check["errors"].values(), default=0.0)
        return ("[green]ok[/]" if check["ok"] else "[red]FAIL[/]") + f" {worst:.1e}"

    for e in results:
        if "error" in e:
            table.add_row(escape(e["device"]), "[red]failed[/]", "", "", "", "", escape(e["error"][:160]), "")
            continue
        lat = e["latency_ms"]
        agree = e.get("agreement")
        peak = sum(m["peak"] for m in e["memory"].values())
        table.add_row(escape(e["device"]), f"{lat['median']:.3f}" if lat else "-", f"{lat['min']:.3f}" if lat else "-",
                      escape(", ".join(f"{d}: {n}" for d, n in e["placement"].items())), str(e["transfers"]),
                      f"{peak / 1024:.0f} KiB", verdict(e.get("check")),
                      (verdict(agree) + f" vs {escape(agree['with'])}") if agree else "-")
    Console().print(table)


def standalone(argv: Any = None) -> int:
    """``python -m devicelayer.cli_run ...`` (until the subcommand is wired into ``devicelayer``)."""
    from .cli import UsageParser

    parser = configure(UsageParser(prog="devicelayer run", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter))
    return main(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(standalone())

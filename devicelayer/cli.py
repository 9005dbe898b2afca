"""The ``devicelayer`` command: ``info``, ``bench``, ``run`` and ``generate``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, NoReturn, Sequence

from . import __version__
from .registry import devices, unavailable

#: version of the ``info --json`` schema; bumped only on incompatible changes
INFO_SCHEMA = "devicelayer.info/1"


class UsageParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr and exit status 2 (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: MESSAGE (see PROG --help)`` and exit with status 2."""
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def info_document(backends: Sequence[str] | None = None, measured: bool = False) -> dict[str, Any]:
    """The ``info --json`` document: every device's DeviceInfo fields and every unavailable backend.

    With ``measured``, each device gets ``measured``: the figures ``devicelayer bench`` cached (or null).
    """
    from .measure import cached

    docs = []
    for dev in devices(backends):
        docs.append(device_document(dev.info, dev.pool.free_bytes))
        if measured:
            docs[-1]["measured"] = cached(dev)
    return {"schema": INFO_SCHEMA, "version": __version__, "devices": docs,
            "unavailable": [{"backend": u.backend, "reason": u.reason} for u in unavailable()]}


def device_document(i: Any, memory_free: int) -> dict[str, Any]:
    """One device's entry of the ``info --json`` document, from its DeviceInfo and free bytes."""
    return {
        "id": i.id, "backend": i.backend, "index": i.index, "name": i.name, "vendor": i.vendor,
        "device_type": i.device_type, "driver_version": i.driver_version, "api_version": i.api_version,
        "kernel_language": i.kernel_language, "memory_total": i.memory_total,
        "memory_free": memory_free, "max_allocation": i.max_allocation,
        "compute_units": i.compute_units, "max_work_group_size": i.max_work_group_size,
        "max_work_item_sizes": list(i.max_work_item_sizes), "subgroup_size": i.subgroup_size,
        "local_memory": i.local_memory, "dtypes": i.as_dict()["dtypes"], "unified_memory": i.unified_memory,
        "view_alignment": i.view_alignment, "peer_access": list(i.peer_access), "timestamps": i.timestamps,
        "max_work_groups": list(i.max_work_groups), "max_global_items": i.max_global_items,
        "matrix_units": [list(u) for u in i.matrix_units],
        "extras": dict(i.extras),
    }


_ROWS = [
    ("name", "name", str), ("vendor", "vendor", str), ("type", "device_type", str),
    ("driver", "driver_version", str), ("API", "api_version", str), ("kernels", "kernel_language", str),
    ("memory total", "memory_total", _human_bytes), ("memory free", "memory_free", _human_bytes),
    ("largest allocation", "max_allocation", _human_bytes), ("compute units", "compute_units", str),
    ("max work-group", "max_work_group_size", str),
    ("max work-item sizes", "max_work_item_sizes", lambda v: " x ".join(map(str, v))),
    ("subgroup/warp", "subgroup_size", lambda v: "-" if v is None else str(v)),
    ("local memory", "local_memory", _human_bytes), ("dtypes", "dtypes", lambda v: " ".join(v)),
    ("unified memory", "unified_memory", lambda v: "yes" if v else "no"),
    ("view alignment", "view_alignment", lambda v: f"{v} B"),
    ("peer access", "peer_access", lambda v: " ".join(v) or "-"),
    ("timestamps", "timestamps", lambda v: "yes" if v else "no"),
    ("matrix units", "matrix_units", lambda v: " ".join(f"{a}->{c} {m}x{n}x{k}" for a, c, m, n, k in v) or "-"),
]


_MEASURED = [("launch + wait", "launch_wait_us", "us"), ("upload", "upload_GBps", "GB/s"),
             ("download", "download_GBps", "GB/s"), ("device copy", "copy_GBps", "GB/s"),
             ("f32 GEMM", "gemm_f32_TFLOPs", "TFLOP/s")]


def _print_table(doc: dict[str, Any], title: str | None = None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    if doc["devices"]:
        table = Table(title=title or f"devicelayer {doc['version']}: devices", show_lines=False)
        table.add_column("field", style="bold")
        for d in doc["devices"]:
            table.add_column(d["id"], overflow="fold", max_width=48)
        for label, key, fmt in _ROWS:
            table.add_row(label, *[escape(fmt(d[key])) for d in doc["devices"]])
        if any("measured" in d for d in doc["devices"]):
            for label, key, unit in _MEASURED:
                table.add_row(f"[cyan]{label}[/]", *[
                    f"{d['measured'][key]:.3g} {unit}" if d.get("measured") else "not measured (devicelayer bench)"
                    for d in doc["devices"]])
        for key in sorted({k for d in doc["devices"] for k in d["extras"]}):
            table.add_row(escape(key), *[escape(str(d["extras"].get(key, "-"))) for d in doc["devices"]])
        console.print(table)
    else:
        console.print("[bold red]no device is usable[/]")
    if doc["unavailable"]:
        missing = Table(title="unavailable")
        missing.add_column("backend", style="bold")
        missing.add_column("reason", overflow="fold")
        for u in doc["unavailable"]:
            missing.add_row(escape(u["backend"]), escape(u["reason"]))
        console.print(missing)


def backends_problem() -> str | None:
    """What is wrong with ``DEVICELAYER_BACKENDS`` (naming the value and the installed backends), or None: every
    command checks it first and answers a bad value as a usage error."""
    from .errors import InvalidArgument
    from .registry import requested_backends

    try:
        requested_backends()
    except InvalidArgument as exc:
        return str(exc)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``devicelayer`` console script (exit status 130 when interrupted, as shells expect)."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("devicelayer: interrupted", file=sys.stderr)
        return 130


def _main(argv: Sequence[str] | None) -> int:
    parser = UsageParser(prog="devicelayer", description="One interface to every compute device.")
    parser.add_argument("--version", action="version", version=f"devicelayer {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="list every device and what it can do, and which backends are missing")
    info.add_argument("--json", action="store_true", help=f"print JSON (schema {INFO_SCHEMA})")
    info.add_argument("--backend", action="append", help="only this backend (repeatable)")
    info.add_argument("--measured", action="store_true", help="add the figures devicelayer bench measured")
    info.add_argument("--cluster", nargs="?", const="", default=None, metavar="ADDRESS",
                      help="every node's devices of the Ray cluster at ADDRESS (default: the one Ray finds, else a "
                           "local one); needs devicelayer[cluster]")
    bench = sub.add_parser("bench", help="measure launch latency, bandwidth and GEMM rate per device (cached)")
    bench.add_argument("--device", action="append", help="device id (repeatable; default: every device)")
    bench.add_argument("--json", action="store_true", help="print the figures as JSON")
    bench.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions")
    from . import cli_generate, cli_run

    cli_run.add_parser(sub)
    cli_generate.add_parser(sub)
    args = parser.parse_args(argv)
    problem = backends_problem()
    if problem:
        print(f"devicelayer {args.command}: {problem}", file=sys.stderr)
        return 2
    if args.command == "run":
        return cli_run.main(args)
    if args.command == "generate":
        return cli_generate.main(args)
    if args.command == "bench":
        return _bench(args)
    if args.command == "info" and args.cluster is not None:
        from .cli_cluster import info

        if args.backend or args.measured:
            print("devicelayer info: --cluster lists every device of every node; --backend and --measured are for "
                  "this machine's devices", file=sys.stderr)
            return 2
        return info(args.cluster or None, args.json)
    if args.command == "info":
        try:
            doc = info_document(args.backend, args.measured)
        except Exception as exc:
            print(f"devicelayer info: {exc}", file=sys.stderr)
            return 2
        if args.json:
            json.dump(doc, sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            _print_table(doc)
    return 0


def _bench(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from .errors import DeviceLayerError
    from .measure import STEPS, measure
    from .registry import device

    try:
        targets = [device(i) for i in args.device] if args.device else devices()
    except DeviceLayerError as exc:
        print(f"devicelayer bench: {exc}", file=sys.stderr)
        return 2
    console = Console(stderr=True)
    results = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("measuring", total=len(targets) * len(STEPS))
        for dev in targets:
            def step(name: str, dev=dev) -> None:
                progress.update(task, advance=1, description=f"{dev.id}: {name}")
            try:
                results.append(measure(dev, quick=args.quick, progress=step))
            except DeviceLayerError as exc:
                results.append({"id": dev.id, "error": str(exc)})
    if args.json:
        json.dump({"schema": "devicelayer.bench/1", "devices": results}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from rich.table import Table

        table = Table(title="devicelayer bench (cached; see devicelayer info --measured)")
        table.add_column("device")
        for label, _, unit in _MEASURED:
            table.add_column(f"{label} ({unit})", justify="right")
        for r in results:
            if "error" in r:
                table.add_row(r["id"], f"failed: {r['error']}", *[""] * (len(_MEASURED) - 1))
            else:
                table.add_row(r["id"], *[f"{r[key]:.3g}" for _, key, _ in _MEASURED])
        Console().print(table)
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())

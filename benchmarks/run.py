"""Run the benchmarks: ``python -m benchmarks.run [--only NAME,...] [--devices ID,...] [--quick] [--out DIR]``.

Prints one table per benchmark and writes everything, with the machine,
date and commit, to ``benchmarks/results/`` (or ``--out``) as JSON.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

import devicelayer as dl

BENCHMARKS = ["launch", "bandwidth", "graph", "gemm", "conv", "dlpack"]
RESULTS = Path(__file__).resolve().parent / "results"
#: environment variables that change the host's BLAS and thread pools (recorded with the results)
THREAD_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def context(devices) -> dict:
    """Where and on what a benchmark ran: date, machine, Python, commit, the devices, the missing backends and
    the BLAS / thread environment."""
    return {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "host": socket.gethostname(),
            "machine": platform.platform(), "python": platform.python_version(), "commit": _commit(),
            "devices": [d.info.as_dict() for d in devices],
            "unavailable": [{"backend": u.backend, "reason": u.reason} for u in dl.unavailable()],
            "env": {k: os.environ[k] for k in THREAD_ENV if k in os.environ}}


def write(doc: dict, folder, name: str) -> Path:
    """Write ``doc`` as ``folder/NAME-HOST-TIME.json``; the path."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = out / f"{name}-{socket.gethostname()}-{stamp}.json"
    path.write_text(json.dumps(doc, indent=2, default=str))
    return path


def _table(title: str, rows: list[dict]) -> Table:
    table = Table(title=title)
    keys = [k for k in rows[0] if k != "name"]
    for k in keys:
        table.add_column(k, justify="right" if isinstance(rows[0][k], (int, float)) else "left")
    for r in rows:
        table.add_row(*[f"{r[k]:.3g}" if isinstance(r[k], float) else str(r[k]) for k in keys])
    return table


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", help="comma-separated benchmark names", default=",".join(BENCHMARKS))
    parser.add_argument("--devices", help="comma-separated device ids (default: every device)")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    parser.add_argument("--out", help="folder for the JSON results", default=str(RESULTS))
    parser.add_argument("--tag", help="name part of the results file", default="")
    args = parser.parse_args(argv)
    devices = [dl.device(i) for i in args.devices.split(",")] if args.devices else dl.devices()
    console = Console()
    doc = {**context(devices), "quick": args.quick, "results": {}}
    for name in [n.strip() for n in args.only.split(",") if n.strip()]:
        module = importlib.import_module(f"benchmarks.{name}")
        with console.status(f"running {name} on {len(devices)} device(s)"):
            rows = module.run(devices, quick=args.quick)
        doc["results"][name] = rows
        if rows:
            console.print(_table(module.TITLE, rows))
        else:
            console.print(f"{name}: no device with a peer to compare against")
    console.print(f"results written to {write(doc, args.out, args.tag or 'bench')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Differential fuzzing: random graphs (devicelayer.graph.fuzz) per backend against their NumPy interpretation.

``python -m benchmarks.fuzz --graphs 500 [--device ID ...] [--max-nodes N] [--seed S]``

For each device, N hypothesis-drawn graphs run with their nodes placed on that
device mixed with the host (explicit random placement, or the "fill" / "spread"
policies); each plan runs twice and every output is compared with the float64
interpretation.  Prints a table (graphs, ops covered, nodes executed, failures)
and writes JSON to ``benchmarks/results/fuzz-<host>-<time>.json``, failures
with the graph that produced them.
"""

from __future__ import annotations

import argparse
import sys
import time

from hypothesis import HealthCheck, Phase, given, seed as hypothesis_seed, settings, strategies as st
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import devicelayer as dl
from devicelayer.graph.fuzz import specs
from devicelayer.kernels.op import OPS

from .run import RESULTS, context, write


def fuzz_backend(device: str, graphs: int, max_nodes: int, seed: int, progress: Progress) -> dict:
    """Run ``graphs`` random graphs over ``device`` and the host; a summary with every failure."""
    devices = [device] if device == "host" else [device, "host"]
    row = {"device": device, "devices": devices, "graphs": 0, "nodes_executed": {}, "ops": set(), "failures": []}
    task = progress.add_task(device, total=graphs)

    @hypothesis_seed(seed)
    @settings(max_examples=graphs, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(specs(devices, max_nodes=max_nodes), st.integers(0, 2**31 - 1))
    def one(spec, data_seed):
        row["graphs"] += 1
        row["ops"].update(c.op for c in spec.calls())
        try:
            problems = spec.run(data_seed, placed=row["nodes_executed"])
        except Exception as exc:  # a crash is a failure to report, not a reason to stop
            problems = [f"{type(exc).__name__}: {exc}"]
        if problems:
            row["failures"].append({"graph": str(spec), "seed": data_seed, "problems": problems})
        progress.advance(task)

    t0 = time.perf_counter()
    one()
    row["seconds"] = round(time.perf_counter() - t0, 1)
    row["ops"] = sorted(row["ops"])
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graphs", type=int, default=500, help="graphs per backend")
    parser.add_argument("--device", action="append", help="device id (repeatable; default: every device)")
    parser.add_argument("--max-nodes", type=int, default=12, help="most op nodes in a graph")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed")
    parser.add_argument("--out", default=str(RESULTS), help="folder for the JSON results")
    args = parser.parse_args(argv)
    devices = args.device or [d.id for d in dl.devices()]
    console = Console()
    columns = (TextColumn("{task.description:>10}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        rows = [fuzz_backend(d, args.graphs, args.max_nodes, args.seed, progress) for d in devices]
    table = Table(title=f"differential fuzzing: random graphs against the float64 NumPy interpretation "
                        f"({len(OPS)} ops in the library)")
    for name in ("backend", "graphs run", "ops covered", "nodes executed", "on the backend", "on the host",
                 "failures", "seconds"):
        table.add_column(name, justify="left" if name == "backend" else "right")
    for r in rows:
        executed = r["nodes_executed"]
        table.add_row(r["device"], str(r["graphs"]), str(len(r["ops"])), str(sum(executed.values())),
                      str(executed.get(r["device"], 0)), "-" if r["device"] == "host" else str(executed.get("host", 0)),
                      str(len(r["failures"])),
                      f"{r['seconds']:.0f}")
    console.print(table)
    for r in rows:
        for f in r["failures"][:3]:
            console.print(f"[red]{r['device']}[/red]: {f['problems'][0]}\n{f['graph']}")
    doc = {**context([dl.device(d) for d in devices]), "graphs_per_backend": args.graphs,
           "max_nodes": args.max_nodes, "seed": args.seed, "library_ops": sorted(OPS), "results": rows}
    console.print(f"results written to {write(doc, args.out, 'fuzz')}")
    return 1 if any(r["failures"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())

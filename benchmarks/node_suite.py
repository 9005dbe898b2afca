"""ONNX's node conformance suite on each device, and on onnxruntime (CPU) as the peer: how many of the 1,884
generated one-op cases pass, are refused (UnsupportedOp), give a wrong answer, fail with another devicelayer
error, or crash; with ``--failures`` every case that does not pass, grouped by its reason.

    python -m benchmarks.node_suite [--device ID ...] [--filter REGEX] [--onnxruntime] [--failures] [--out DIR]
"""

from __future__ import annotations

import argparse
import collections
import re
import time
import warnings
from typing import Any

from benchmarks.common import write_result
from devicelayer.onnx.conformance import CRASH, ERROR, PASS, UNSUPPORTED, WRONG, Outcome, node_cases, run_suite

STATUSES = (PASS, UNSUPPORTED, WRONG, ERROR, CRASH)


def _as_array(x: Any) -> Any:
    """A NumPy array for onnxruntime (which refuses NumPy scalars); sequences and None as they are."""
    import numpy as np

    return np.asarray(x) if isinstance(x, np.generic) else x


def onnxruntime_outcome(case: Any) -> Outcome:
    """The case on onnxruntime's CPU provider, compared as for devicelayer."""
    import onnxruntime as ort
    from onnx.backend.test.runner import Runner, _normalize_tensor

    t0 = time.perf_counter()
    try:
        opts = ort.SessionOptions()
        opts.log_severity_level = 4
        sess = ort.InferenceSession(case.model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        for inputs, refs in case.data_sets:
            feeds = dict(zip(names, [_as_array(_normalize_tensor(x)) for x in inputs]))
            outs = sess.run(None, feeds)
            Runner.assert_similar_outputs([_normalize_tensor(x) for x in refs], outs, case.rtol, case.atol)
        status, detail = PASS, ""
    except AssertionError as e:
        status, detail = WRONG, str(e).strip()
    except Exception as e:  # noqa: BLE001 - onnxruntime refuses with its own exception types
        text = f"{type(e).__name__}: {e}"
        status = UNSUPPORTED if re.search(r"NOT_IMPLEMENTED|not implemented|Could not find an implementation|"
                                          r"No Op registered|not supported|INVALID_GRAPH|NoSuchFile", text) else ERROR
        detail = text
    return Outcome(case.name, "onnxruntime", status, detail[:2000], time.perf_counter() - t0)


def reason_key(o: Outcome) -> str:
    """A reason shared by many cases: the message without node names, numbers and quoted values."""
    text = re.sub(r"node '[^']*' \([^)]*\): ", "", o.detail.splitlines()[0] if o.detail else "")
    text = re.sub(r"'[^']*'", "'…'", text)
    text = re.sub(r"\d+", "N", text)
    return f"{o.status}: {text[:140]}"


def main(argv: list[str] | None = None) -> int:
    import devicelayer as dl

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", action="append", help="device id (repeatable); default: every device")
    ap.add_argument("--filter", help="regular expression on the case name")
    ap.add_argument("--onnxruntime", action="store_true", help="run onnxruntime (CPU) on the same cases")
    ap.add_argument("--failures", action="store_true", help="list the cases that do not pass, by reason")
    ap.add_argument("--out", help="folder for the JSON results")
    args = ap.parse_args(argv)
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    console = Console()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node_cases(args.filter)
    devices = args.device or [d.id for d in dl.devices()]
    results: dict[str, list[Outcome]] = {}
    with Progress(console=console, transient=True) as bar:
        for dev in devices:
            task = bar.add_task(f"{dev}", total=len(cases))
            results[dev] = run_suite(dev, cases, lambda o, t=task: bar.advance(t))
        if args.onnxruntime:
            task = bar.add_task("onnxruntime", total=len(cases))
            results["onnxruntime (CPU)"] = []
            for c in cases:
                results["onnxruntime (CPU)"].append(onnxruntime_outcome(c))
                bar.advance(task)
    table = Table(title=f"ONNX node suite: {len(cases)} cases")
    table.add_column("run")
    for s in STATUSES:
        table.add_column(s, justify="right")
    table.add_column("seconds", justify="right")
    for run, outs in results.items():
        counts = collections.Counter(o.status for o in outs)
        table.add_row(run, *[str(counts.get(s, 0)) for s in STATUSES], f"{sum(o.seconds for o in outs):.1f}")
    console.print(table)
    if args.failures:
        for run, outs in results.items():
            groups: dict[str, list[str]] = collections.defaultdict(list)
            for o in outs:
                if o.status != PASS:
                    groups[reason_key(o)].append(o.name)
            console.print(f"\n[bold]{run}[/]: {sum(map(len, groups.values()))} not passing")
            for key, names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
                console.print(f"  {len(names):4d}  {key}\n        {' '.join(names[:6])}{' …' if len(names) > 6 else ''}",
                              highlight=False, markup=False)
    if args.out:
        path = write_result(args.out, "node-suite", {
            "cases": len(cases),
            "runs": {run: {"counts": dict(collections.Counter(o.status for o in outs)),
                           "cases": {o.name: [o.status, o.detail[:300]] for o in outs}}
                     for run, outs in results.items()}})
        console.print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

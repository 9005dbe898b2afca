"""Before/after table of ``benchmarks.host_vs_onnxruntime`` results: per model the median ratio
(devicelayer / onnxruntime) over the JSON files of each side, and the geometric mean of those medians.

    python -m benchmarks.host_vs_onnxruntime_compare BEFORE_DIR AFTER_DIR [--markdown]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any


def rows_of(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """Every row of every result file under ``folder``, by model."""
    out: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(folder.rglob("host-vs-ort*.json")):
        for row in json.loads(path.read_text()).get("rows", []):
            out.setdefault(row["model"], []).append(row)
    return out


def summary(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Medians over the runs of one model (None where every run failed)."""
    ok = [r for r in rows if "ratio" in r]
    if not ok:
        return None  # (no run, or every run failed: their errors are in the files)
    return {"ratio": statistics.median(r["ratio"] for r in ok), "runs": [round(r["ratio"], 2) for r in ok],
            "devicelayer_ms": statistics.median(r["devicelayer_ms"] for r in ok),
            "onnxruntime_ms": statistics.median(r["onnxruntime_ms"] for r in ok),
            "max_rel_diff": max(r["max_rel_diff"] for r in ok)}


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    args = ap.parse_args(argv)
    before, after = rows_of(Path(args.before)), rows_of(Path(args.after))
    print("| model | before: devicelayer ms | onnxruntime ms | ratio (runs) | after: devicelayer ms | onnxruntime ms "
          "| ratio (runs) | max rel diff |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    both_b, both_a = [], []
    for model in list(dict.fromkeys([*before, *after])):
        b, a = summary(before.get(model, [])), summary(after.get(model, []))

        def cells(s: dict[str, Any] | None) -> str:
            if s is None:
                return "| | | no run "
            return (f"| {s['devicelayer_ms']:.2f} | {s['onnxruntime_ms']:.2f} | **{s['ratio']:.2f}** "
                    f"({', '.join(f'{r:.2f}' for r in s['runs'])}) ")
        print(f"| {model} {cells(b)}{cells(a)}| {a['max_rel_diff'] if a else float('nan'):.1e} |")
        if a is not None and b is not None:
            both_b.append(b["ratio"])
            both_a.append(a["ratio"])
    gb, ga = geomean(both_b), geomean(both_a)
    print(f"| geometric mean ({len(both_a)} models) | | | **{gb:.2f}** | | | **{ga:.2f}** | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

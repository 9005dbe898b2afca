"""Timing helpers shared by the benchmarks."""

from __future__ import annotations

import json
import platform
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any, Callable


def commit() -> str:
    """The checkout's commit, ``-dirty`` when the files differ from it (as where a copy of a working tree runs
    over another checkout's history); "unknown" outside git."""
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=7"], capture_output=True,
                              text=True, cwd=Path(__file__).parent, timeout=30).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def write_result(folder: str | Path, name: str, fields: dict[str, Any]) -> Path:
    """Write ``fields`` with the benchmark's name, date, machine and commit as ``folder/name-<time>.json``."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"benchmark": name.replace("-", "_"), "date": time.strftime("%Y-%m-%d"), "machine": platform.node(),
           "commit": commit(), **fields}
    path = out / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(doc, indent=1, default=str))
    return path


def best_median(fn: Callable[[], float], rounds: int) -> float:
    """Median of ``rounds`` calls of ``fn`` (each returns seconds)."""
    return statistics.median(fn() for _ in range(rounds))


def per_call(fn: Callable[[], object], calls: int, after: Callable[[], object] | None = None) -> float:
    """Seconds per call of ``fn`` over ``calls`` back-to-back calls (``after`` runs untimed)."""
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    dt = time.perf_counter() - t0
    if after is not None:
        after()
    return dt / calls


def interleaved(a: Callable[[], float], b: Callable[[], float], rounds: int) -> tuple[float, float]:
    """Medians of ``a`` and ``b`` measured in alternation, so drift hits both alike."""
    xs, ys = [], []
    for _ in range(rounds):
        xs.append(a())
        ys.append(b())
    return statistics.median(xs), statistics.median(ys)


def seconds_per_call(call: Callable[[], object], sync: Callable[[], object], budget: float, rounds: int,
                     max_reps: int = 20) -> float:
    """Median seconds per call: ``call`` back to back (as many as fit ``budget``, at most ``max_reps``) then
    ``sync``, ``rounds`` times, after a warm-up call (compiles, allocates, loads libraries)."""
    call()
    sync()
    t0 = time.perf_counter()
    call()
    sync()
    once = time.perf_counter() - t0
    reps = max(1, min(max_reps, int(budget / max(once, 1e-6))))
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            call()
        sync()
        times.append((time.perf_counter() - t0) / reps)
    return statistics.median(times)


def block_ms(fn: Callable[[], object], seconds: float, least: int = 3) -> float:
    """Median milliseconds of a call of ``fn`` over calls for ``seconds`` (at least ``least``), after a warm-up."""
    fn()
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < least:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def alternating_ms(contestants: dict[str, Callable[[], object]], rounds: int, seconds: float) -> dict[str, float]:
    """Per contestant, the median over ``rounds`` of its ``block_ms``, the contestants' order reversed every other
    round so drift hits each alike."""
    blocks: dict[str, list[float]] = {n: [] for n in contestants}
    for r in range(rounds):
        for name in (list(contestants) if r % 2 else list(contestants)[::-1]):
            blocks[name].append(block_ms(contestants[name], seconds))
    return {n: statistics.median(v) for n, v in blocks.items()}

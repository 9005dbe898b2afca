"""The host device against onnxruntime's CPU provider on real architectures, in one process.

    python -m benchmarks.host_vs_onnxruntime --models-dir DIR [--model NAME ...] [--threads N] [--rounds R]
                                             [--out DIR] [--tag TAG]

Models come from ``DIR/NAME.onnx`` (``benchmarks.arch_models``: random weights, batch 1); where a file is missing
and torch imports, it is exported first.  Each model runs as a devicelayer plan on the host and as an
onnxruntime session (``intra_op_num_threads`` = the CPUs devicelayer uses, ``inter_op_num_threads`` = 1,
sequential execution, all graph optimisations), inputs from and outputs to NumPy for both; the outputs are
compared (largest difference over the largest magnitude of onnxruntime's output).  Timing: after two warm-up
calls each, ``--rounds`` rounds, each timing a block of back-to-back calls of one contestant then of the other
(the order alternating between rounds), a ``--pause`` between blocks; per contestant the median over rounds of
the per-call time of its block.  Where a model file is missing, it is exported here with PyTorch first: the
process then holds PyTorch's OpenMP runtime and its threads too (oneDNN keeps a runtime of its own:
``backends/host/omp_copy.py``).  ``--ort-config KEY=VALUE`` adds session config entries to onnxruntime's session
(``session.intra_op.allow_spinning=0``: its pool's threads block instead of spinning after a call).
``--threads N`` limits the process to N CPUs (its affinity, before anything starts threads), so devicelayer's
pools and onnxruntime's use the same cores.

Prints a table; writes JSON (machine, date, commit, threads, versions, whether oneDNN is there (``onednn``:
its version, or null where the host runs NumPy and OpenBLAS), per model times and ratio, the geometric mean of
the ratios) under ``--out``.  ``benchmarks.host_vs_onnxruntime_compare`` tabulates two sets of results.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def _limit_cpus(threads: int | None) -> int:
    """Keep the process on its first ``threads`` CPUs (all where None); how many it has."""
    cpus = sorted(os.sched_getaffinity(0))
    if threads is not None and threads < len(cpus):
        os.sched_setaffinity(0, cpus[:threads])
        cpus = cpus[:threads]
    return len(cpus)


def random_feeds(model: Any, seed: int) -> dict[str, np.ndarray]:
    """Fresh inputs for the model's (fixed) input shapes: normal floats, token ids below 100, masks of ones."""
    from onnx import helper

    rng = np.random.default_rng(seed)
    feeds = {}
    inits = {i.name for i in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        t = inp.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in t.shape.dim)
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type))
        if dtype.kind == "f":
            feeds[inp.name] = rng.standard_normal(shape).astype(dtype)
        elif "mask" in inp.name:
            feeds[inp.name] = np.ones(shape, dtype)
        else:
            feeds[inp.name] = rng.integers(0, 100, shape).astype(dtype)
    return feeds


def _block(fn: Callable[[], Any], calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def paired(dl_run: Callable[[], Any], ort_run: Callable[[], Any], rounds: int, pause: float,
           block_s: float) -> tuple[float, float, list[float]]:
    """Median seconds per call of each contestant, and the per-round ratios, in alternating blocks."""
    for _ in range(2):
        dl_run()
        ort_run()
    once = max(_block(ort_run, 1), 1e-5)
    calls = max(1, min(200, int(block_s / once)))
    ds, os_, ratios = [], [], []
    for r in range(rounds):
        order = [(dl_run, ds), (ort_run, os_)]
        if r % 2:
            order.reverse()
        for fn, out in order:
            time.sleep(pause)
            out.append(_block(fn, calls))
        ratios.append(ds[-1] / os_[-1])
    return statistics.median(ds), statistics.median(os_), ratios


def max_rel_diff(ours: list[np.ndarray], theirs: list[np.ndarray]) -> float:
    """Largest absolute difference over the largest magnitude of the reference, over every output."""
    worst = 0.0
    for a, b in zip(ours, theirs, strict=True):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if a.shape != b.shape:
            return math.inf
        scale = max(float(np.max(np.abs(b), initial=0.0)), 1e-30)
        worst = max(worst, float(np.max(np.abs(a - b), initial=0.0)) / scale)
    return worst


def bench_model(path: Path, threads: int, rounds: int, pause: float, block_s: float, seed: int,
                ort_config: dict[str, str] | None = None) -> dict[str, Any]:
    """One model: load both, compare outputs, time them paired."""
    import onnx
    import onnxruntime as ort

    import devicelayer.onnx as dlo

    model = onnx.load(str(path))
    feeds = random_feeds(model, seed)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    for key, value in (ort_config or {}).items():
        opts.add_session_config_entry(key, value)
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    t0 = time.perf_counter()
    plan = dlo.load(model).compile(["host"])
    compile_s = time.perf_counter() - t0
    names = [o.name for o in sess.get_outputs()]
    want = sess.run(names, feeds)
    got_map = plan.run_numpy(feeds)
    got = [got_map[n] for n in names]
    row: dict[str, Any] = {"model": path.stem, "nodes": len(model.graph.node), "compile_s": compile_s,
                           "max_rel_diff": max_rel_diff(got, want)}
    dl_s, ort_s, ratios = paired(lambda: plan.run_numpy(feeds), lambda: sess.run(names, feeds), rounds, pause,
                                 block_s)
    row.update(devicelayer_ms=dl_s * 1e3, onnxruntime_ms=ort_s * 1e3, ratio=dl_s / ort_s,
               ratio_min=min(ratios), ratio_max=max(ratios))
    plan.release()
    return row


def _versions() -> dict[str, Any]:
    import onnxruntime as ort

    import devicelayer as dl

    from devicelayer.backends.host import dnnl

    host = dl.device("host").info
    return {"devicelayer": str(Path(dl.__file__).parent), "onnxruntime": ort.__version__, "numpy": np.__version__,
            "onednn": dnnl.version(),
            "python": platform.python_version(), "cpu": host.name,
            "host_conv": host.extras.get("conv"), "onednn_threads": host.extras.get("onednn_threads"),
            "host_runner": host.extras.get("host_runner"),
            "blas": {k: v for k, v in host.extras.items() if k.startswith("blas")}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-dir", required=True, help="folder of NAME.onnx files (exported here if torch imports)")
    ap.add_argument("--model", action="append", help="model name (repeatable; default every one)")
    ap.add_argument("--threads", type=int, help="CPUs for both (default: every CPU of the process)")
    ap.add_argument("--rounds", type=int, default=7, help="timed rounds per contestant (default 7)")
    ap.add_argument("--pause", type=float, default=0.05, help="seconds of idle before each block (default 0.05)")
    ap.add_argument("--block", type=float, default=0.3, help="seconds of calls in a block (default 0.3)")
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000, help="input seed (default: fresh)")
    ap.add_argument("--out", default=str(RESULTS), help="folder of the JSON results")
    ap.add_argument("--tag", default="", help="name part of the JSON file")
    ap.add_argument("--ort-config", action="append", default=[], metavar="KEY=VALUE",
                    help="an onnxruntime session config entry (repeatable), e.g. session.intra_op.allow_spinning=0")
    args = ap.parse_args(argv)
    ort_config = dict(item.split("=", 1) for item in args.ort_config)
    threads = _limit_cpus(args.threads)  # before onnxruntime or devicelayer start a thread

    from rich.console import Console
    from rich.table import Table

    from benchmarks.arch_models import ARCHS, export
    from benchmarks.common import write_result

    console = Console(width=140)
    folder = Path(args.models_dir)
    rows = []
    for name in args.model or list(ARCHS):
        path = folder / f"{name}.onnx"
        if not path.exists():
            try:
                export(ARCHS[name], path)
            except ImportError as exc:
                rows.append({"model": name, "error": f"no {path} and no torch to export it: {exc}"})
                continue
        try:
            row = bench_model(path, threads, args.rounds, args.pause, args.block, args.seed, ort_config)
        except Exception as exc:  # noqa: BLE001 - a model devicelayer cannot run is a row, not a crash
            row = {"model": name, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        rows.append(row)
        console.print(_line(row), highlight=False, markup=False)
    ok = [r["ratio"] for r in rows if "ratio" in r]
    geomean = math.exp(sum(math.log(r) for r in ok) / len(ok)) if ok else math.nan
    table = Table(title=f"host vs onnxruntime CPU, {threads} thread(s) each (ms per inference, medians)")
    for col in ("model", "nodes", "devicelayer ms", "onnxruntime ms", "ratio", "range", "max rel diff"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for r in rows:
        if "error" in r:
            table.add_row(r["model"], "", "", "", "", "", r["error"][:60])
            continue
        table.add_row(r["model"], str(r["nodes"]), f"{r['devicelayer_ms']:.2f}", f"{r['onnxruntime_ms']:.2f}",
                      f"{r['ratio']:.2f}", f"{r['ratio_min']:.2f}-{r['ratio_max']:.2f}", f"{r['max_rel_diff']:.1e}")
    table.add_row("geometric mean", "", "", "", f"{geomean:.2f}", "", "")
    console.print(table)
    fields = {"threads": threads, "onnxruntime_intra_op_threads": threads, "rounds": args.rounds,
              "pause_s": args.pause, "block_s": args.block, "seed": args.seed,
              "onnxruntime_config": ort_config, "machine_info": platform.platform(),
              "cpus_in_machine": os.cpu_count(), "env": {k: os.environ[k] for k in
                                                          ("OMP_NUM_THREADS", "OPENBLAS_CORETYPE",
                                                           "DEVICELAYER_ONEDNN", "DEVICELAYER_PIN_THREADS")
                                                          if k in os.environ},
              "versions": _versions(), "geomean_ratio": geomean, "rows": rows}
    path = write_result(args.out, f"host-vs-ort{'-' + args.tag if args.tag else ''}", fields)
    console.print(f"wrote {path}")
    return 0


def _line(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"{r['model']}: {r['error']}"
    return (f"{r['model']}: devicelayer {r['devicelayer_ms']:.2f} ms, onnxruntime {r['onnxruntime_ms']:.2f} ms, "
            f"ratio {r['ratio']:.2f} [{r['ratio_min']:.2f}-{r['ratio_max']:.2f}], diff {r['max_rel_diff']:.1e}")


if __name__ == "__main__":
    raise SystemExit(main())

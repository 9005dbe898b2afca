"""Cold start: seconds from a fresh process's start to a model's first result, devicelayer against onnxruntime's
session creation and PyTorch's first call.

    python -m benchmarks.cold_start --models-dir DIR [--model NAME ...] [--device cuda:0] [--repeat N]
                                    [--profile] [--out DIR]

Every contestant runs in a process of its own, started by this one, with the same inputs (written once):

- ``devicelayer cold``: an empty disk cache (``DEVICELAYER_CACHE`` and ``CUPY_CACHE_DIR`` both fresh): import,
  ``load``, ``compile([device])``, ``run_numpy``.
- ``devicelayer warm``: the same again, ``--repeat`` times, each a new process over the cache the cold one left
  (the second process loading the same model on the same device).
- ``onnxruntime``: import, ``InferenceSession`` (the CUDA provider where the device is a CUDA device, else the CPU
  provider), ``run``.
- ``torch``: import torch and torchvision/transformers, build the module (random weights), move it to the GPU,
  the first call, synchronised (CUDA devices only).

"first result" is wall time from just before the process was started to the output being in host memory; the
children also report their phases (import, load or session, compile, first run).  devicelayer's modules are
byte-compiled first, as installing a package does, and the children keep the bytecode of what they import
(``PYTHONDONTWRITEBYTECODE`` is dropped from their environment).  Outputs are checked against
onnxruntime's.  ``--profile`` writes the devicelayer processes' cProfile summaries (top 80 by cumulative time,
top 40 by own time) beside the JSON.  Models come from ``DIR/NAME.onnx`` (exported by ``benchmarks.arch_models``
where missing).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parent.parent


# -- the child processes ------------------------------------------------------------------------------------------
def _child_devicelayer(model: str, feeds_path: str, device_id: str, out_path: str) -> dict[str, float]:
    t0 = time.perf_counter()
    import devicelayer as dl
    from devicelayer.onnx import load

    t1 = time.perf_counter()
    feeds = dict(np.load(feeds_path))
    dev = dl.device(device_id)
    t2 = time.perf_counter()
    graph = load(model)
    t3 = time.perf_counter()
    plan = graph.compile([dev])
    t4 = time.perf_counter()
    out = plan.run_numpy(feeds)
    t5 = time.perf_counter()
    np.save(out_path, np.asarray(next(iter(out.values()))))
    return {"import_s": t1 - t0, "device_s": t2 - t1, "load_s": t3 - t2, "compile_s": t4 - t3,
            "first_run_s": t5 - t4}


def _child_onnxruntime(model: str, feeds_path: str, device_id: str, out_path: str) -> dict[str, float]:
    t0 = time.perf_counter()
    import onnxruntime as ort

    t1 = time.perf_counter()
    feeds = dict(np.load(feeds_path))
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if device_id.startswith("cuda") else \
        ["CPUExecutionProvider"]
    session = ort.InferenceSession(model, providers=providers)
    t2 = time.perf_counter()
    out = session.run(None, feeds)
    t3 = time.perf_counter()
    np.save(out_path, np.asarray(out[0]))
    return {"import_s": t1 - t0, "session_s": t2 - t1, "first_run_s": t3 - t2,
            "provider": session.get_providers()[0]}


def _child_torch(name: str, feeds_path: str, device_id: str, out_path: str) -> dict[str, float]:
    t0 = time.perf_counter()
    import torch

    from benchmarks.gpu_vs_torch import _arch

    t1 = time.perf_counter()
    module, example, names = _arch(name).build()
    module = module.eval().to("cuda")
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    feeds = np.load(feeds_path)
    with torch.no_grad():
        ins = [torch.from_numpy(feeds[n]).to("cuda") for n in names]
        out = module(*ins)
        out = out[0] if isinstance(out, (tuple, list)) else out
        out = getattr(out, "last_hidden_state", out)
        result = out.float().cpu().numpy()
    t3 = time.perf_counter()
    np.save(out_path, result)
    return {"import_s": t1 - t0, "build_s": t2 - t1, "first_run_s": t3 - t2}


CHILDREN = {"devicelayer": _child_devicelayer, "onnxruntime": _child_onnxruntime, "torch": _child_torch}


def _child(argv: list[str]) -> int:
    kind, target, feeds, device_id, out, profile = argv
    if profile:
        import cProfile
        import io
        import pstats

        prof = cProfile.Profile()
        phases = prof.runcall(CHILDREN[kind], target, feeds, device_id, out)
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(80)
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(40)
        Path(profile).write_text(text.getvalue())
    else:
        phases = CHILDREN[kind](target, feeds, device_id, out)
    print("PHASES " + json.dumps(phases), flush=True)
    print(f"DONE {time.time()!r}", flush=True)
    return 0


# -- the parent ---------------------------------------------------------------------------------------------------
def _spawn(kind: str, target: str, feeds: Path, device_id: str, out: Path, env: dict[str, str],
           profile: str = "") -> dict[str, Any]:
    start = time.time()
    proc = subprocess.run([sys.executable, "-m", "benchmarks.cold_start", "--child", kind, target, str(feeds),
                           device_id, str(out), profile], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=900)
    ended = time.time()
    row: dict[str, Any] = {"exit_s": ended - start}
    lines = proc.stdout.splitlines()
    done = [ln for ln in lines if ln.startswith("DONE ")]
    if proc.returncode != 0 or not done:
        row["error"] = (proc.stderr or proc.stdout)[-600:]
        return row
    row["first_result_s"] = float(done[-1].split()[1]) - start
    row.update(json.loads(next(ln for ln in lines if ln.startswith("PHASES "))[7:]))
    return row


def _rel_err(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)) if b.size else 0.0


def run_model(name: str, models_dir: Path, device_id: str, repeat: int, profile_dir: Path | None) -> dict:
    """Every contestant's cold start for one model."""
    import onnx

    from benchmarks.host_vs_onnxruntime import random_feeds

    path = models_dir / f"{name}.onnx"
    if not path.exists():
        from benchmarks import arch_models
        from benchmarks.gpu_vs_torch import _arch

        arch_models.export(_arch(name), path)
    row: dict[str, Any] = {"model": name, "device": device_id}
    with tempfile.TemporaryDirectory(prefix="cold-start-") as tmp:
        work = Path(tmp)
        feeds = work / "feeds.npz"
        np.savez(feeds, **random_feeds(onnx.load(str(path), load_external_data=False), seed=1))
        base = {**os.environ, "DEVICELAYER_CACHE": str(work / "cache"), "CUPY_CACHE_DIR": str(work / "cupy")}
        base.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode is kept, as in an ordinary environment
        outputs: dict[str, Path] = {}
        runs = [("devicelayer cold", "devicelayer", str(path))]
        runs += [(f"devicelayer warm {k + 1}", "devicelayer", str(path)) for k in range(repeat)]
        runs += [("onnxruntime", "onnxruntime", str(path))]
        if device_id.startswith("cuda"):
            runs += [("torch", "torch", name)]
        for label, kind, target in runs:
            outputs[label] = work / f"{label.replace(' ', '_')}.npy"
            profile = str(profile_dir / f"cold-start-{name}-{label.replace(' ', '-')}.txt") \
                if profile_dir is not None and kind == "devicelayer" else ""
            row[label] = _spawn(kind, target, feeds, device_id, outputs[label], base, profile)
            print(f"  {name} {label}: {row[label].get('first_result_s', row[label].get('error'))}", flush=True)
        if outputs["onnxruntime"].exists():
            ref = np.load(outputs["onnxruntime"])
            for label, out in outputs.items():
                if label != "onnxruntime" and out.exists():
                    got = np.load(out)
                    row[label]["max_rel_err"] = _rel_err(got, ref) if got.shape == ref.shape else None
    peer = row["onnxruntime"].get("first_result_s")
    for label in list(row):
        if label.startswith("devicelayer") and peer and "first_result_s" in row[label]:
            row[label]["/ onnxruntime"] = row[label]["first_result_s"] / peer
    return row


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return _child(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-dir", required=True, help="folder of NAME.onnx files (exported where missing)")
    ap.add_argument("--model", action="append", help="model name (repeatable; default resnet50)")
    ap.add_argument("--device", default="cuda:0", help="devicelayer device id (default cuda:0)")
    ap.add_argument("--repeat", type=int, default=2, help="warm processes after the cold one (default 2)")
    ap.add_argument("--profile", action="store_true", help="write cProfile summaries of the devicelayer processes")
    ap.add_argument("--out", default=str(RESULTS), help="folder of the JSON result")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for package in ("devicelayer", "backends"):  # bytecode, as an installed package has it (pip compiles it)
        compileall.compile_dir(str(ROOT / package), quiet=1)
    rows = []
    for name in args.model or ["resnet50"]:
        print(f"{name} on {args.device}", flush=True)
        rows.append(run_model(name, Path(args.models_dir), args.device, args.repeat,
                              out if args.profile else None))
    result = {"benchmark": "cold_start", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": platform.node(),
              "python": platform.python_version(), "rows": rows}
    target = out / f"cold-start-{args.device.replace(':', '')}.json"
    target.write_text(json.dumps(result, indent=1))
    for row in rows:
        for label, r in row.items():
            if isinstance(r, dict):
                print(f"{row['model']:<18} {label:<20} first result {r.get('first_result_s', float('nan')):7.2f} s"
                      f"  {'  '.join(f'{k} {v:.2f}' for k, v in r.items() if k.endswith('_s') and k != 'exit_s')}"
                      f"{'  ERROR ' + r['error'][-200:] if 'error' in r else ''}")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

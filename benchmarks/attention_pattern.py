"""The attention pattern on exported transformers: per family and device, the kernels a run launches and its time
with the pattern and without it (attention's nodes kept), timed in one process in alternating blocks, and each
plan's largest difference from onnxruntime over the family's batch sizes and sequence lengths.

    python -m benchmarks.attention_pattern [--family NAME ...] [--device ID ...] [--models-dir DIR]
                                           [--export-only] [--seconds S] [--out DIR]

The families are ``benchmarks.exported_models``'s transformers (TorchScript exporter, opset 17, dynamic batch and
sequence).  With torch and transformers installed they are exported here, and written to ``--models-dir``
(NAME.onnx, NAME.npz with the inputs) when it is given; without them they are read from there.  Times are of the
family's largest batch and length.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from typing import Any, Callable

import numpy as np

from benchmarks.common import alternating_ms, write_result

FAMILIES = ["bert", "distilbert", "gpt2", "vit", "whisper_encoder", "t5_encoder"]


def export(name: str) -> tuple[bytes, dict[str, np.ndarray]]:
    """The family's ONNX file and its inputs at every batch size and length (``B_L_input`` keys)."""
    from benchmarks.arch_models import _transformers
    from benchmarks.exported_models import FAMILIES as ALL, export as export_family

    _transformers()  # (transformers importable where a torchvision's compiled ops do not load)
    fam = ALL[name]
    data, _ = export_family(fam, "torchscript", 17)
    _, ins, _, _, make = fam.build()
    feeds = {}
    for b in fam.batches:
        for length in fam.lengths or (0,):
            for n, x in zip(ins, make(b, length)):
                feeds[f"{b}_{length}_{n}"] = x.numpy()
    return data, feeds


def _cases(feeds: dict[str, np.ndarray], names: list[str]) -> list[dict[str, np.ndarray]]:
    """The input sets of ``feeds`` (``B_L_input`` keys), smallest first."""
    keys = sorted({tuple(int(x) for x in k.split("_", 2)[:2]) for k in feeds})
    return [{n: feeds[f"{b}_{length}_{n}"] for n in names} for b, length in keys]


def measure(name: str, data: bytes, feeds: dict[str, np.ndarray], device: str, seconds: float) -> dict[str, Any]:
    """Kernel counts, ms a run (median of alternating blocks) and the largest difference from onnxruntime (relative
    to each output's largest magnitude), with the attention pattern and without it."""
    import onnxruntime as ort

    import devicelayer.onnx as dlo
    from benchmarks.host_overhead import _no_attention

    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    cases = _cases(feeds, [i.name for i in sess.get_inputs()])
    wants = [sess.run(None, c) for c in cases]
    forms: dict[str, Callable[[], Any]] = {"nodes": _no_attention, "attention": contextlib.nullcontext}
    plans = {}
    for form, ctx in forms.items():
        with ctx():
            plans[form] = dlo.load(data).compile([device])
    doc: dict[str, Any] = {"family": name, "device": device}
    for form, plan in plans.items():
        worst = 0.0
        with forms[form]():  # (a model of dynamic shapes places and fuses each new shape at its first run)
            for c, want in zip(cases, wants):
                got = plan.run_numpy(c)
                for w, g in zip(want, got.values()):
                    scale = max(1.0, float(np.max(np.abs(w))))
                    worst = max(worst, float(np.max(np.abs(np.asarray(g, np.float64) - w))) / scale)
        doc[form] = {"kernels": plan.kernel_counts()["after"], "max_rel_diff": worst,
                     "attention_ops": str(plan.placement_report()).count("fused attention")}
    def run(form: str) -> None:
        with forms[form]():
            plans[form].run_numpy(cases[-1])
    times = alternating_ms({form: (lambda f=form: run(f)) for form in plans}, 5, seconds)
    for form in plans:
        doc[form]["ms"] = times[form]
        plans[form].release()
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", action="append", help=f"one of {FAMILIES} (repeatable; default all)")
    ap.add_argument("--device", action="append", help="device id (repeatable; default every device)")
    ap.add_argument("--models-dir", help="folder of NAME.onnx and NAME.npz (read without torch, written with it)")
    ap.add_argument("--export-only", action="store_true", help="export to --models-dir and stop")
    ap.add_argument("--seconds", type=float, default=0.3, help="length of a timed block")
    ap.add_argument("--out", help="folder for the JSON results")
    args = ap.parse_args(argv)
    families = args.family or FAMILIES
    models = {}
    for name in families:
        path = os.path.join(args.models_dir or ".", name)
        try:
            data, feeds = export(name)
            if args.models_dir:
                os.makedirs(args.models_dir, exist_ok=True)
                with open(path + ".onnx", "wb") as f:
                    f.write(data)
                np.savez(path + ".npz", **feeds)
        except ImportError:
            if not args.models_dir:
                raise
            with open(path + ".onnx", "rb") as f:
                data = f.read()
            feeds = dict(np.load(path + ".npz"))
        models[name] = (data, feeds)
    if args.export_only:
        return 0
    import devicelayer as dl

    devices = args.device or [d.id for d in dl.devices()]
    rows = []
    print(f"{'family':16s} {'device':10s} {'kernels':>15s} {'ms a run':>17s} {'max rel diff':>19s}  attention ops")
    for name, (data, feeds) in models.items():
        for dev in devices:
            d = measure(name, data, feeds, dev, args.seconds)
            rows.append(d)
            a, n = d["attention"], d["nodes"]
            print(f"{name:16s} {dev:10s} {n['kernels']:>6d} -> {a['kernels']:<6d} {n['ms']:>7.3f} -> {a['ms']:<7.3f} "
                  f"{n['max_rel_diff']:>8.1e} / {a['max_rel_diff']:<8.1e}  {a['attention_ops']}", flush=True)
    if args.out:
        write_result(args.out, "attention-pattern", {"rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The row kernels' two forms on a device (``kernels/ops/rows.py``: a work-group per row, a work item per row):
softmax and layer normalization over the last axis of each shape, one plan compiled in each form, timed in one
process in alternating blocks.

    python -m benchmarks.row_forms [--device ID ...] [--shape 2x4x128x128 ...] [--seconds S] [--out DIR]

Prints ms a run per op, shape and form, which form ``grouped_rows`` takes there, and each form's largest difference
from the op's float64 reference (relative to the output's largest magnitude).
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Any, Iterator

import numpy as np

from benchmarks.common import alternating_ms, write_result

SHAPES = ["2x4x128x128", "1x12x128x128", "128x1000", "8x4096", "8x768", "1x50000"]


@contextlib.contextmanager
def _form(grouped: bool) -> Iterator[None]:
    """Plans compiled inside take the group form (``grouped``) or the item form for every row kernel."""
    from devicelayer.kernels.ops import rows

    chosen = rows.grouped_rows
    rows.grouped_rows = lambda R, K, info: grouped
    try:
        yield
    finally:
        rows.grouped_rows = chosen


def _graph(op: str, shape: tuple[int, ...]) -> Any:
    import devicelayer as dl

    g = dl.Graph()
    x = g.input("x", shape)
    if op == "softmax":
        g.output("y", g.softmax(x, axis=-1))
    else:
        k = shape[-1]
        g.output("y", g.layer_normalization(x, g.constant(np.ones(k, np.float32)),
                                            g.constant(np.zeros(k, np.float32)), axis=-1))
    return g


def measure(device: str, op: str, shape: tuple[int, ...], seconds: float) -> dict[str, Any]:
    """ms a run of each form (median of alternating blocks) and the form ``grouped_rows`` chooses."""
    import devicelayer as dl
    from devicelayer.kernels.ops.rows import axis_rows, grouped_rows

    dev = dl.device(device)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    plans = {}
    for name, grouped in (("group", True), ("item", False)):
        with _form(grouped):
            plans[name] = _graph(op, shape).compile([dev])
    from devicelayer.kernels.op import TensorType, get

    graph_op = get(op)
    ins = [x.astype(np.float64)] + ([np.ones(shape[-1]), np.zeros(shape[-1])] if op != "softmax" else [])
    attrs, _ = graph_op.prepare([TensorType(a.shape, a.dtype) for a in ins], {"axis": -1})
    want = graph_op.reference(ins, attrs)[0]
    errors = {n: float(np.max(np.abs(p(x=x)["y"] - want)) / max(1.0, float(np.max(np.abs(want)))))
              for n, p in plans.items()}
    times = alternating_ms({name: (lambda p=p: p(x=x)) for name, p in plans.items()}, 5, seconds)
    for p in plans.values():
        p.release()
    R, K, _ = axis_rows(shape, len(shape) - 1)
    return {"device": device, "op": op, "shape": list(shape), "chosen": "group" if grouped_rows(R, K, dev.info)
            else "item", **{f"{n}_ms": t for n, t in times.items()},
            **{f"{n}_max_diff": e for n, e in errors.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", action="append", help="device id (repeatable; default every kernel device)")
    ap.add_argument("--shape", action="append", help=f"AxBx... (repeatable; default {SHAPES})")
    ap.add_argument("--seconds", type=float, default=0.3, help="length of a timed block")
    ap.add_argument("--out", help="folder for the JSON results")
    args = ap.parse_args(argv)
    import devicelayer as dl

    devices = args.device or [d.id for d in dl.devices() if d.info.kernel_language != "python"]
    rows = []
    print(f"{'device':10s} {'op':20s} {'shape':16s} {'group ms':>9s} {'item ms':>9s}  chosen  largest difference "
          "from float64, group / item")
    for dev in devices:
        for op in ("softmax", "layer_normalization"):
            for text in args.shape or SHAPES:
                r = measure(dev, op, tuple(int(v) for v in text.split("x")), args.seconds)
                rows.append(r)
                print(f"{dev:10s} {op:20s} {text:16s} {r['group_ms']:9.3f} {r['item_ms']:9.3f}  {r['chosen']:6s}  "
                      f"{r['group_max_diff']:.1e} / {r['item_max_diff']:.1e}", flush=True)
    if args.out:
        write_result(args.out, "row-forms", {"rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

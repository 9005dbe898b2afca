"""Attention's plans on a device (``kernels/ops/attention.py``: the fused kernel, the tiled kernel, the composition
of GEMM kernels and a row kernel), the same attention as separate nodes (products, scale, mask, softmax: on CUDA
cuBLAS's products), and, where PyTorch sees a CUDA device, ``torch.nn.functional.scaled_dot_product_attention`` on
it: each timed in one process in alternating blocks, inputs already on the device, a call and its wait.

    python -m benchmarks.attention_forms [--device ID ...] [--shape BxHxSxD ...] [--mask] [--lanes] [--rows]
                                         [--seconds S] [--out DIR]

Prints ms a call per device, shape and contestant (``tiled/N``: the tiled kernel with N items a query row;
``blocked/N``: the blocked kernel with N query rows an item), the form ``Attention.form`` takes there (with the
lanes or rows it chooses), and each contestant's
largest difference from the float64 reference (relative to the output's largest magnitude).
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

import numpy as np

from benchmarks.common import alternating_ms, write_result

#: BERT-base and BERT-mini at 128 tokens, batch 1 and 16; ViT-B/16's 197 tokens; Whisper-tiny's 1500 frames
SHAPES = ["1x12x128x64", "16x12x128x64", "16x4x128x64", "1x12x197x64", "1x6x1500x64", "4x16x512x64"]


def _torch_sdpa(dev: Any, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None) -> \
        tuple[Callable[[], object], Callable[[], np.ndarray]] | None:
    """A call of PyTorch's fused attention on the CUDA device ``dev`` and a reader of its output, or None."""
    if dev.info.kernel_language != "cuda":
        return None
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    cuda = torch.device(f"cuda:{dev.info.index}")
    tq, tk, tv = (torch.from_numpy(a).to(cuda) for a in (q, k, v))
    tm = torch.from_numpy(mask).to(cuda) if mask is not None else None
    out: list[Any] = []

    def call() -> None:
        out[:] = [F.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm)]
        torch.cuda.synchronize(cuda)

    return call, lambda: out[0].cpu().numpy()


def measure(device: str, shape: tuple[int, int, int, int], masked: bool, seconds: float,
            lanes_too: bool = False, rows_too: bool = False) -> dict[str, Any]:
    """ms a call of each contestant (median of alternating blocks), the chosen form (the tiled kernel's lanes
    or the blocked kernel's rows chosen; with ``lanes_too`` the tiled kernel with each other lane count, with
    ``rows_too`` the blocked kernel with each other row count) and each one's error."""
    import devicelayer as dl
    from devicelayer.kernels.op import TensorType, get
    from devicelayer.kernels.ops import attention as attention_op
    from devicelayer.kernels.runner import run

    dev = dl.device(device)
    B, H, S, D = shape
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    mask = rng.uniform(-2, 0, (B, 1, 1, S)).astype(np.float32) if masked else None
    arrays = [q, k, v] + ([mask] if masked else [])
    types = [TensorType(a.shape, a.dtype) for a in arrays]
    op = get("attention")
    want = op.reference([a.astype(np.float64) for a in arrays], op.prepare(types, {})[0])[0]
    ins = [dl.tensor(a, dev) for a in arrays]
    kt = dl.tensor(np.ascontiguousarray(np.swapaxes(k, 2, 3)), dev)
    scale = dl.tensor(np.array(1.0 / np.sqrt(D), np.float32), dev)
    results: dict[str, Callable[[], np.ndarray]] = {}
    calls: dict[str, Callable[[], object]] = {}

    def form_call(name: str, form: str, lanes: int | None = None, rows: int | None = None) -> Callable[[], object]:
        out: list[Any] = []

        def call() -> None:
            with attention_op.forcing(form, lanes, rows):
                out[:] = run("attention", ins)
            out[0].ready.wait()

        results[name] = lambda: out[0].numpy()
        return call

    for form in attention_op.FORMS:
        with attention_op.forcing(form):
            if op.form(types, dev.info) == form:
                calls[form] = form_call(form, form)
                if form == "tiled":
                    tiling = op._tiling(types, dev.info)
                if form == "blocked":
                    blocking = op._blocking(types, dev.info)
    if lanes_too and "tiled" in calls:
        for lanes in attention_op.TILED_LANES:
            if lanes != tiling[1]:
                calls[f"tiled/{lanes}"] = form_call(f"tiled/{lanes}", "tiled", lanes)
    if rows_too and "blocked" in calls:
        for rows in attention_op.BLOCKED_ROWS:
            if rows != blocking[1]:
                calls[f"blocked/{rows}"] = form_call(f"blocked/{rows}", "blocked", rows=rows)
    nodes_out: list[Any] = []

    def nodes() -> None:
        s = run("mul", [run("matmul", [ins[0], kt])[0], scale])[0]
        if masked:
            s = run("add", [s, ins[3]])[0]
        y = run("matmul", [run("softmax", [s], axis=-1)[0], ins[2]])[0]
        y.ready.wait()
        nodes_out[:] = [y]

    calls["nodes"] = nodes
    results["nodes"] = lambda: nodes_out[0].numpy()
    peer = _torch_sdpa(dev, q, k, v, mask)
    if peer is not None:
        calls["torch_sdpa"], results["torch_sdpa"] = peer
    times = alternating_ms(calls, 5, seconds)
    top = max(1.0, float(np.max(np.abs(want))))
    errors = {n: float(np.max(np.abs(results[n]() - want))) / top for n in calls}
    chosen = op.form(types, dev.info)
    if chosen == "tiled":
        chosen += f"/{op._tiling(types, dev.info)[1]}"
    if chosen == "blocked":
        chosen += f"/{op._blocking(types, dev.info)[1]}"
    return {"device": device, "shape": list(shape), "mask": masked, "chosen": chosen,
            "ms": times, "max_diff": errors}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", action="append", help="device id (repeatable; default every kernel device)")
    ap.add_argument("--shape", action="append", help=f"BxHxSxD (repeatable; default {SHAPES})")
    ap.add_argument("--mask", action="store_true", help="add a float key mask (B, 1, 1, S), as BERT's")
    ap.add_argument("--lanes", action="store_true", help="time the tiled kernel with every lane count too")
    ap.add_argument("--rows", action="store_true", help="time the blocked kernel with every row count too")
    ap.add_argument("--seconds", type=float, default=0.3, help="length of a timed block")
    ap.add_argument("--out", help="folder for the JSON results")
    args = ap.parse_args(argv)
    import devicelayer as dl

    devices = args.device or [d.id for d in dl.devices() if d.info.kernel_language != "python"]
    rows = []
    for dev in devices:
        for text in args.shape or SHAPES:
            shape = tuple(int(v) for v in text.split("x"))
            r = measure(dev, shape, args.mask, args.seconds, args.lanes, args.rows)  # type: ignore[arg-type]
            rows.append(r)
            cells = "  ".join(f"{n} {ms:8.3f} ({r['max_diff'][n]:.0e})" for n, ms in r["ms"].items())
            print(f"{dev:10s} {text:14s} chosen {r['chosen']:8s}  {cells}", flush=True)
    if args.out:
        write_result(args.out, "attention-forms", {"rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

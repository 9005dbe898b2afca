"""Fusion: kernel launches per run and latency of each model compiled with fusion against the same model compiled
without (``compile(fuse=False)``), in the same process, timed in alternation; outputs checked against each other
and against onnxruntime.

Models: the nine light_* models of the onnx package (random weights), the bundled tiny GPT (two layers, its
GELU in the tanh form written out) and a transformer block whose LayerNorms and GELU are written out as PyTorch
exports them (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add; Div, Erf, Add, Mul, Mul).

    python -m benchmarks.fusion [--device ID ...] [--model NAME ...] [--repeat N] [--out DIR]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from typing import Any

import numpy as np

from benchmarks.common import write_result


def decomposed_block(seq: int = 64, dim: int = 128, seed: int = 0) -> Any:
    """A pre-norm transformer MLP block with the LayerNorms and the GELU written out (opset 17)."""
    from onnx import helper

    from devicelayer.onnx.testing import make_model

    rng = np.random.default_rng(seed)
    inits: dict[str, np.ndarray] = {"two": np.float32(2.0), "eps": np.float32(1e-5), "sqrt2": np.float32(math.sqrt(2)),
                                    "one": np.float32(1.0), "half": np.float32(0.5)}
    nodes: list[Any] = []

    def node(op: str, ins: list[str], out: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def layer_norm(x: str, p: str) -> str:
        inits[f"{p}_w"] = (1 + 0.1 * rng.standard_normal(dim)).astype(np.float32)
        inits[f"{p}_b"] = (0.1 * rng.standard_normal(dim)).astype(np.float32)
        mean = node("ReduceMean", [x], f"{p}_mean", axes=[-1])
        d = node("Sub", [x, mean], f"{p}_d")
        var = node("ReduceMean", [node("Pow", [d, "two"], f"{p}_sq")], f"{p}_var", axes=[-1])
        std = node("Sqrt", [node("Add", [var, "eps"], f"{p}_var_eps")], f"{p}_std")
        return node("Add", [node("Mul", [node("Div", [d, std], f"{p}_n"), f"{p}_w"], f"{p}_scaled"), f"{p}_b"],
                    f"{p}_out")

    def linear(x: str, p: str, n_in: int, n_out: int) -> str:
        inits[f"{p}_w"] = (rng.standard_normal((n_in, n_out)) / math.sqrt(n_in)).astype(np.float32)
        inits[f"{p}_b"] = (0.1 * rng.standard_normal(n_out)).astype(np.float32)
        return node("Add", [node("MatMul", [x, f"{p}_w"], f"{p}_mm"), f"{p}_b"], f"{p}_out")

    h = linear(layer_norm("x", "ln1"), "fc1", dim, 4 * dim)
    erf = node("Erf", [node("Div", [h, "sqrt2"], "g_div")], "g_erf")
    gelu = node("Mul", [node("Mul", [h, node("Add", [erf, "one"], "g_add")], "g_mul"), "half"], "gelu")
    y = node("Add", ["x", linear(gelu, "fc2", 4 * dim, dim)], "res")
    node("Identity", [layer_norm(y, "ln2")], "y")
    x = rng.standard_normal((1, seq, dim)).astype(np.float32)
    return make_model(nodes, {"x": x}, ["y"], inits), {"x": x}


def _tiny_gpt() -> tuple[Any, dict[str, np.ndarray]]:
    from devicelayer.onnx.tiny_gpt import tiny_gpt

    model = tiny_gpt(seed=3)
    rng = np.random.default_rng(5)
    past, seq = 8, 16
    feeds: dict[str, np.ndarray] = {"input_ids": rng.integers(0, 96, (1, seq)).astype(np.int64),
                                    "attention_mask": np.ones((1, past + seq), np.int64),
                                    "position_ids": np.arange(past, past + seq, dtype=np.int64)[None]}
    for vi in model.graph.input:
        if vi.name.startswith("past_key_values"):
            feeds[vi.name] = rng.standard_normal((1, 2, past, 8)).astype(np.float32)
    return model, feeds


def models(names: list[str] | None) -> list[tuple[str, Any, dict[str, np.ndarray]]]:
    """(name, ModelProto, feeds) of every model benchmarked (those in ``names`` where given)."""
    import onnx

    from devicelayer.onnx.testing import LIGHT, light_path, random_inputs, randomize_weights

    out = []
    for name in LIGHT:
        if names and name not in names:
            continue
        model = randomize_weights(onnx.load(str(light_path(name))), seed=7, expose_logits=False)
        out.append((name, model, random_inputs(model, seed=3)))
    if not names or "tiny_gpt" in names:
        out.append(("tiny_gpt", *_tiny_gpt()))
    if not names or "decomposed_block" in names:
        out.append(("decomposed_block", *decomposed_block()))
    return out


def _error(a: dict[str, Any], b: dict[str, Any]) -> float:
    from devicelayer.onnx.testing import scaled_error

    return max(scaled_error(np.asarray(a[k]), np.asarray(b[k])) for k in b)


def measure(name: str, model: Any, feeds: dict[str, np.ndarray], device: str, repeat: int) -> dict[str, Any]:
    """One model on one device: kernel counts, latencies fused and unfused (alternating), errors."""
    from devicelayer.onnx import load
    from devicelayer.onnx.testing import onnxruntime_run

    row: dict[str, Any] = {"model": name, "device": device}
    try:
        loaded = load(model)
        fused, plain = loaded.compile([device]), loaded.compile([device], fuse=False)
        got, unfused = fused.run_numpy(feeds), plain.run_numpy(feeds)
        row["kernels"] = fused.kernel_counts()
        row["kernels_unfused"] = plain.kernel_counts()["after"]
        row["error_vs_unfused"] = _error(got, unfused)
        try:
            row["error_vs_onnxruntime"] = _error(got, onnxruntime_run(model, feeds))
        except ImportError:
            row["error_vs_onnxruntime"] = float("nan")
        times: dict[str, list[float]] = {"fused": [], "unfused": []}
        for _ in range(repeat):
            for key, plan in (("fused", fused), ("unfused", plain)):
                t0 = time.perf_counter()
                plan.run_numpy(feeds)
                times[key].append(time.perf_counter() - t0)
        row["fused_ms"] = statistics.median(times["fused"]) * 1e3
        row["unfused_ms"] = statistics.median(times["unfused"]) * 1e3
        row["ratio"] = row["fused_ms"] / row["unfused_ms"]
        fused.release()
        plain.release()
    except Exception as exc:  # noqa: BLE001 - one model failing on one device is a result, not the end
        row["error"] = f"{type(exc).__name__}: {exc}"[:300]
    return row


def main() -> None:
    import devicelayer as dl

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", action="append", help="device id (repeatable; default every device)")
    parser.add_argument("--model", action="append", help="model name (repeatable; default every model)")
    parser.add_argument("--repeat", type=int, default=10, help="timed runs of each plan (default 10)")
    parser.add_argument("--out", default="benchmarks/results", help="folder of the JSON result")
    args = parser.parse_args()
    devices = args.device or [d.id for d in dl.devices()]
    rows = []
    print(f"{'model':<18} {'device':<10} {'kernels before':>14} {'after':>6} {'unfused ms':>11} {'fused ms':>9} "
          f"{'ratio':>6} {'err vs unfused':>14} {'err vs ort':>10}")
    for name, model, feeds in models(args.model):
        for device in devices:
            row = measure(name, model, feeds, device, args.repeat)
            rows.append(row)
            if "error" in row:
                print(f"{name:<18} {device:<10} failed: {row['error']}")
                continue
            k = row["kernels"]
            print(f"{name:<18} {device:<10} {k['before']:>14} {k['after']:>6} {row['unfused_ms']:>11.2f} "
                  f"{row['fused_ms']:>9.2f} {row['ratio']:>6.2f} {row['error_vs_unfused']:>14.1e} "
                  f"{row['error_vs_onnxruntime']:>10.1e}", flush=True)
    path = write_result(args.out, "fusion", {"devices": devices, "repeat": args.repeat, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

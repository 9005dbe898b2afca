"""devicelayer on a GPU against PyTorch eager and ``torch.compile`` on the same models, batch sizes and precisions.

    python -m benchmarks.gpu_vs_torch [--device cuda:0 ...] [--model NAME ...] [--batch 1 --batch 16]
                                      [--dtype float32 --dtype float16] [--compile reduce-overhead ...] [--out DIR]

Each model (``benchmarks.arch_models``, random weights, nothing downloaded) is exported to ONNX per batch size
and precision (half precision: the module converted with ``.half()`` and exported in half; where onnx's checker
refuses that export in float16, as it does a transformer whose upcasts feed a LayerNormalization with float16
weights, the float32 export converted by onnxconverter-common's ``float16`` tool instead), loaded by devicelayer
with fusion and without (``compile(fuse=False)``: the kernel counts before and after), and timed in the same
process against PyTorch on the same GPU: eager, and ``torch.compile`` in each mode asked for. Every contestant
takes its inputs from and returns its outputs to host NumPy arrays; calls alternate between contestants. Outputs
are checked against PyTorch's (float32: 1e-3 relative to the output's largest magnitude; half: 2e-2, or no further
from the float32 model's output than twice PyTorch's own half-precision output is, ``accepted``).
Results: a table of ratios (devicelayer's time over the peer's; below 1 is faster) and JSON under ``--out``.
``--tf32``: float32 products and convolutions may run TF32 on both sides (tolerance then 1e-2).
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
import traceback
import warnings
from typing import Any, Callable

import numpy as np

from benchmarks.common import write_result

#: models the benchmark runs by default (``benchmarks.arch_models`` names, plus ResNet-50)
DEFAULT_MODELS = ["resnet50", "efficientnet_b0", "convnext_tiny", "mobilenet_v2", "bert", "gpt2"]
TOLERANCE = {"float32": 1e-3, "float16": 2e-2, "bfloat16": 5e-2}


def _arch(name: str):
    from benchmarks import arch_models

    if name == "resnet50":
        return arch_models.Arch("resnet50", arch_models._vision("resnet50"))
    return arch_models.ARCHS[name]


def _batched(example: tuple, batch: int, torch: Any) -> tuple:
    """The example inputs repeated along the batch dimension."""
    return tuple(x.repeat(batch, *([1] * (x.dim() - 1))) for x in example)


def _export(module: Any, example: tuple, names: list[str]) -> bytes:
    import torch

    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, example, buf, input_names=names, opset_version=17, dynamo=False)
    return buf.getvalue()


def _checked(model_bytes: bytes) -> str | None:
    """onnx's full check of an exported model: None where it passes, else its message."""
    import onnx

    try:
        onnx.checker.check_model(onnx.load_from_string(model_bytes), full_check=True)
    except Exception as exc:  # noqa: BLE001 - the message is what is reported
        return f"{type(exc).__name__}: {str(exc)[:300]}"
    return None


def _float16_converted(module: Any, example: tuple, names: list[str]) -> bytes:
    """The module exported in float32 and converted to float16 by onnxconverter-common (the module is in its own
    precision again after).  Casts to float32 the export had (a half model's upcasts) cast to float16, so the
    whole model computes in half as its converted weights do."""
    import onnx
    from onnxconverter_common import float16

    own = next(module.parameters()).dtype
    module.float()
    try:
        model = onnx.load_from_string(_export(module, tuple(x.float() if x.is_floating_point() else x
                                                             for x in example), names))
    finally:
        module.to(own)
    upcasts = {n.name for n in model.graph.node if n.op_type == "Cast"
               and any(a.name == "to" and a.i == onnx.TensorProto.FLOAT for a in n.attribute)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (each weight below half's smallest normal is reported)
        model = float16.convert_float_to_float16(model, keep_io_types=False)
    for node in model.graph.node:
        if node.name in upcasts:
            for a in node.attribute:
                if a.name == "to":
                    a.i = onnx.TensorProto.FLOAT16
    return model.SerializeToString()


def _bfloat16_retyped(model_bytes: bytes) -> bytes:
    """A float16 model with every float16 tensor type, initializer, constant and cast in bfloat16 instead (the
    values rounded to bfloat16 through float32)."""
    import onnx
    from onnx import TensorProto, numpy_helper

    from devicelayer.dtypes import dtype as as_dtype

    bf16 = as_dtype("bfloat16")

    def tensor(t: Any) -> None:
        if t.data_type == TensorProto.FLOAT16:
            values = numpy_helper.to_array(t).astype(np.float32).astype(bf16)
            t.ClearField("int32_data")
            t.data_type = TensorProto.BFLOAT16
            t.raw_data = values.view(np.uint16).tobytes()

    def value_type(v: Any) -> None:
        if v.type.tensor_type.elem_type == TensorProto.FLOAT16:
            v.type.tensor_type.elem_type = TensorProto.BFLOAT16

    def graph(g: Any) -> None:
        for t in g.initializer:
            tensor(t)
        for v in (*g.input, *g.output, *g.value_info):
            value_type(v)
        for node in g.node:
            for a in node.attribute:
                if a.type == onnx.AttributeProto.TENSOR:
                    tensor(a.t)
                elif a.type == onnx.AttributeProto.GRAPH:
                    graph(a.g)
                elif a.name == "to" and a.type == onnx.AttributeProto.INT and a.i == TensorProto.FLOAT16:
                    a.i = TensorProto.BFLOAT16

    model = onnx.load_from_string(model_bytes)
    graph(model.graph)
    return model.SerializeToString()


def _median_ms(fn: Callable[[], Any], seconds: float, least: int = 5) -> float:
    times = []
    end = time.perf_counter() + seconds
    while len(times) < least or time.perf_counter() < end:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _alternating(contestants: dict[str, Callable[[], Any]], rounds: int, seconds: float) -> dict[str, float]:
    """Median milliseconds of each contestant, measured in ``rounds`` alternating turns."""
    samples: dict[str, list[float]] = {k: [] for k in contestants}
    for _ in range(rounds):
        for name, fn in contestants.items():
            samples[name].append(_median_ms(fn, seconds / rounds))
    return {k: statistics.median(v) for k, v in samples.items()}


def _max_rel(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30)) if b.size else 0.0


def accepted(dtype: str, err: float, err32: float | None, torch_err32: float | None, tf32: bool = False) -> bool:
    """Whether devicelayer's output counts as right: within ``TOLERANCE`` of PyTorch's output (1e-2 with TF32); in
    half precision, or no further from the float32 model's output than twice PyTorch's own half-precision output is
    (``err32``, ``torch_err32``: relative to the float32 output's largest magnitude), whichever is looser."""
    if err <= (1e-2 if tf32 and dtype == "float32" else TOLERANCE[dtype]):
        return True
    return (dtype != "float32" and err32 is not None and torch_err32 is not None
            and err32 <= max(TOLERANCE[dtype], 2 * torch_err32))


def run_case(name: str, batch: int, dtype: str, device_ids: list[str], modes: list[str], seconds: float,
             tf32: bool = False) -> dict:
    """One model at one batch size and precision: every devicelayer device against PyTorch."""
    import torch

    import devicelayer as dl
    from devicelayer.onnx import load

    row: dict[str, Any] = {"model": name, "batch": batch, "dtype": dtype}
    module, example, names = _arch(name).build()
    tdtype = getattr(torch, dtype)
    module = module.cuda().eval()
    example = _batched(example, batch, torch)
    reference32 = None
    if dtype != "float32":  # (the float32 model's output: what half precision is judged against)
        with torch.no_grad():
            out32 = module(*(x.float().cuda() if x.is_floating_point() else x.cuda() for x in example))
            reference32 = (out32[0] if isinstance(out32, (tuple, list)) else out32).float().cpu().numpy()
        module = module.to(tdtype)
        example = tuple(x.to(tdtype) if x.is_floating_point() else x for x in example)
    host_inputs = [x.numpy() if x.dtype != torch.bfloat16 else x.float().numpy() for x in example]
    with torch.no_grad():
        try:
            model_bytes = _export(module, tuple(x.cuda() for x in example), names)
            problem = _checked(model_bytes)
        except Exception as exc:  # noqa: BLE001 - (PyTorch's exporter refuses some bfloat16 models)
            if dtype != "bfloat16":
                raise
            model_bytes, problem = b"", f"{type(exc).__name__}: {str(exc)[:300]}"
        row["export"] = f"torch.onnx.export in {dtype}"
        if problem is not None and dtype == "bfloat16":
            row["export refused"] = problem
            model_bytes = _bfloat16_retyped(_float16_converted(module, tuple(x.cuda() for x in example), names))
            row["export"] = ("torch.onnx.export in float32, onnxconverter-common's float16 conversion, float16 "
                             "retyped as bfloat16")
        if problem is not None and dtype == "float16":
            # PyTorch's export of a half model can mix float32 and float16 where ONNX allows one type (a
            # LayerNormalization fed by float32 upcasts: onnx's checker and onnxruntime refuse it too)
            row["export refused"] = problem
            model_bytes = _float16_converted(module, tuple(x.cuda() for x in example), names)
            row["export"] = "torch.onnx.export in float32, onnxconverter-common's float16 conversion"

    def torch_call(fn: Callable) -> Callable[[], np.ndarray]:
        def call() -> np.ndarray:
            with torch.no_grad():
                ins = [torch.from_numpy(a).to("cuda", non_blocking=False) for a in host_inputs]
                ins = [x.to(tdtype) if x.is_floating_point() else x for x in ins]
                out = fn(*ins)
                out = out[0] if isinstance(out, (tuple, list)) else out
                return out.float().cpu().numpy()
        return call

    contestants: dict[str, Callable[[], Any]] = {"torch eager": torch_call(module)}
    reference = contestants["torch eager"]()
    torch_err32 = _max_rel(reference, reference32) if reference32 is not None else None
    if torch_err32 is not None:
        row["torch eager max_rel_err vs float32"] = torch_err32
    for mode in modes:
        t0 = time.perf_counter()
        try:
            compiled = torch.compile(module, mode=mode)
            call = torch_call(compiled)
            for _ in range(3):
                call()
            contestants[f"torch.compile {mode}"] = call
            row[f"torch.compile {mode} compile_s"] = time.perf_counter() - t0
        except Exception as exc:  # noqa: BLE001 - a peer that fails is reported, the others go on
            row[f"torch.compile {mode} error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    feeds = dict(zip(names, host_inputs))
    if dtype == "bfloat16":  # (what a bfloat16 model's user passes)
        from devicelayer.dtypes import dtype as as_dtype

        feeds = {n: a.astype(as_dtype(dtype)) if a.dtype == np.float32 else a for n, a in feeds.items()}
    for dev_id in device_ids:
        dev = dl.device(dev_id)
        for fuse in (True, False):
            key = f"{dev_id}{'' if fuse else ' unfused'}"
            try:
                t0 = time.perf_counter()
                plan = load(model_bytes).compile([dev], fuse=fuse, allow_tf32=tf32)
                out = plan.run_numpy(feeds)
                row[f"{key} first_run_s"] = time.perf_counter() - t0
                first = next(iter(out.values()))
                row[f"{key} max_rel_err"] = err = _max_rel(first, reference)
                err32 = _max_rel(first, reference32) if reference32 is not None else None
                if err32 is not None:
                    row[f"{key} max_rel_err vs float32"] = err32
                counts = plan.kernel_counts() if hasattr(plan, "kernel_counts") else {}
                row[f"{key} kernels"] = counts.get("after")
                row[f"{dev_id} kernels unfused"] = counts.get("before")
                if not accepted(dtype, err, err32, torch_err32, tf32):
                    row[f"{key} error"] = (f"output differs from PyTorch by {err:.3g} (relative)"
                                           + (f", from float32 by {err32:.3g} (PyTorch's: {torch_err32:.3g})"
                                              if err32 is not None else ""))
                    continue
                contestants[key] = lambda p=plan: p.run_numpy(feeds)
            except Exception as exc:  # noqa: BLE001
                row[f"{key} error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    times = _alternating(contestants, rounds=3, seconds=seconds)
    row.update({f"{k} ms": v for k, v in times.items()})
    for dev_id in device_ids:
        ours = times.get(dev_id)
        if ours is None:
            continue
        for peer in [p for p in times if p.startswith("torch")]:
            row[f"{dev_id} / {peer}"] = ours / times[peer]
        if f"{dev_id} unfused" in times:
            row[f"{dev_id} fused / unfused"] = ours / times[f"{dev_id} unfused"]
    del contestants
    torch.cuda.empty_cache()
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", action="append", help="devicelayer device id (repeatable; default cuda:0)")
    ap.add_argument("--model", action="append", help=f"model (repeatable; default {DEFAULT_MODELS})")
    ap.add_argument("--batch", action="append", type=int, help="batch size (repeatable; default 1 and 16)")
    ap.add_argument("--dtype", action="append", choices=sorted(TOLERANCE), help="precision (default float32)")
    ap.add_argument("--compile", action="append", default=None,
                    help="torch.compile mode to compare with (repeatable; 'none' for eager only; "
                         "default reduce-overhead)")
    ap.add_argument("--seconds", type=float, default=3.0, help="timing per contestant and case")
    ap.add_argument("--out", help="folder for the JSON result (default benchmarks/results)")
    ap.add_argument("--tf32", action="store_true",
                    help="float32 products and convolutions in TF32 on both sides (compile(allow_tf32=True), "
                         "torch's allow_tf32 flags)")
    args = ap.parse_args(argv)
    modes = [m for m in (args.compile or ["reduce-overhead"]) if m != "none"]
    import torch

    # float32 is float32 for both sides: devicelayer leaves TF32 off unless asked, so PyTorch does too here
    # (with --tf32 both allow it)
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    rows = []
    for name in args.model or DEFAULT_MODELS:
        for dtype in args.dtype or ["float32"]:
            for batch in args.batch or [1, 16]:
                t0 = time.perf_counter()
                try:
                    row = run_case(name, batch, dtype, args.device or ["cuda:0"], modes, args.seconds, args.tf32)
                except Exception as exc:  # noqa: BLE001 - one case's failure is reported, the others go on
                    row = {"model": name, "batch": batch, "dtype": dtype,
                           "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]}
                row["case_s"] = time.perf_counter() - t0
                rows.append(row)
                ratios = {k: round(v, 3) for k, v in row.items() if " / " in k and isinstance(v, float)}
                kernels = {k: v for k, v in row.items() if "kernels" in k}
                errors = {k: v for k, v in row.items() if k.endswith("error")}
                print(f"{name} b{batch} {dtype}: {ratios} {kernels} {errors or ''}", flush=True)
    path = write_result(args.out or "benchmarks/results", "gpu-vs-torch",
                        {"rows": rows, "modes": modes, "torch": torch.__version__,
                         "gpu": torch.cuda.get_device_name(0), "allow_tf32": args.tf32})
    print(f"results written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Greedy decoding with a KV cache: tokens per second of ``devicelayer.onnx.generate`` on each device, against
onnxruntime (CPU) on the same ONNX model and, where PyTorch is installed, against PyTorch's own greedy loop on the
same decoder (on CUDA when there is one); the tokens of every run compared with the reference's.

    python -m benchmarks.generate [--device ID ...] [--tokens N] [--layers N] [--out DIR]

Models: the bundled ``tiny_gpt`` (2 layers, 16 wide), and with torch a GPT-2-small-sized decoder (12 layers,
768 wide, 12 heads, random weights) exported by torch.onnx with its cache as inputs and outputs.
"""

from __future__ import annotations

import argparse
import io
import time
from typing import Any

import numpy as np

from benchmarks.common import write_result
from benchmarks.torch_decoder import cached_block


def _torch_decoder(layers: int, width: int, heads: int, vocab: int, positions: int) -> Any:
    """A GPT-2-style decoder (torch) whose forward takes and returns its KV cache as tensors."""
    import torch

    nn = torch.nn
    torch.manual_seed(0)

    Block = cached_block(torch)

    class Decoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(positions, width)
            self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
            self.ln = nn.LayerNorm(width)

        def forward(self, input_ids, attention_mask, position_ids, *cache):
            x = self.wte(input_ids) + self.wpe(position_ids)
            present = []
            for i, block in enumerate(self.blocks):
                x, k, v = block(x, cache[2 * i], cache[2 * i + 1], attention_mask)
                present += [k, v]
            return (self.ln(x) @ self.wte.weight.T, *present)

    return Decoder().eval()


def _export(module: Any, layers: int, heads: int, width: int) -> bytes:
    import torch

    names = ["input_ids", "attention_mask", "position_ids"]
    cache_names = [f"past_key_values.{i}.{t}" for i in range(layers) for t in ("key", "value")]
    outs = ["logits"] + [f"present.{i}.{t}" for i in range(layers) for t in ("key", "value")]
    dk = width // heads
    example = (torch.zeros(2, 3, dtype=torch.int64), torch.ones(2, 5, dtype=torch.int64),
               torch.arange(2, 5).repeat(2, 1), *[torch.zeros(2, heads, 2, dk) for _ in cache_names])
    axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "total"},
            "position_ids": {0: "batch", 1: "sequence"}}
    axes.update({n: {0: "batch", 2: "past_sequence"} for n in cache_names})
    buf = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(module, example, buf, input_names=names + cache_names, output_names=outs,
                          dynamic_axes=axes, opset_version=17, dynamo=False)
    return buf.getvalue()


def _torch_generate(module: Any, prompt: np.ndarray, tokens: int, layers: int, heads: int, width: int,
                    device: str) -> tuple[np.ndarray, float]:
    """PyTorch's greedy decode of the same module (eager, no_grad); tokens and tokens/s after the prompt."""
    import torch

    module = module.to(device)
    dk = width // heads
    ids = torch.tensor(prompt, device=device)
    b, n = ids.shape
    cache = [torch.zeros(b, heads, 0, dk, device=device) for _ in range(2 * layers)]
    out = []
    with torch.no_grad():
        res = module(ids, torch.ones(b, n, dtype=torch.int64, device=device), torch.arange(n, device=device)
                     .repeat(b, 1), *cache)
        tok = res[0][:, -1].argmax(-1)
        out.append(tok)
        cache = list(res[1:])
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for step in range(1, tokens):
            pos = n + step - 1
            res = module(tok[:, None], torch.ones(b, pos + 1, dtype=torch.int64, device=device),
                         torch.full((b, 1), pos, device=device), *cache)
            tok = res[0][:, -1].argmax(-1)
            out.append(tok)
            cache = list(res[1:])
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
    return torch.stack(out, 1).cpu().numpy(), (tokens - 1) / dt


def main(argv: list[str] | None = None) -> int:
    import devicelayer as dl
    import devicelayer.onnx as dlo
    from devicelayer.onnx.generate import Generator, onnxruntime_generate
    from devicelayer.onnx.tiny_gpt import tiny_gpt

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", action="append", help="device id (repeatable; default every device)")
    ap.add_argument("--tokens", type=int, default=64, help="tokens to generate (default 64)")
    ap.add_argument("--layers", type=int, default=12, help="layers of the torch decoder (default 12)")
    ap.add_argument("--out", help="folder for the JSON results")
    args = ap.parse_args(argv)
    from rich.console import Console
    from rich.table import Table

    console = Console()
    devices = args.device or [d.id for d in dl.devices()]
    rows: list[dict[str, Any]] = []
    prompt = np.array([[4, 17, 9, 60, 2, 33, 71, 5]])
    models: list[tuple[str, bytes, Any]] = [("tiny_gpt", tiny_gpt(seed=3).SerializeToString(), None)]
    try:
        import torch

        width, heads = 768, 12
        module = _torch_decoder(args.layers, width, heads, 50257 // 8, 1024)
        models.append((f"gpt2-like ({args.layers} layers, 768 wide)", _export(module, args.layers, heads, width),
                       module))
    except ImportError:
        torch = None
    for name, data, module in models:
        ref = onnxruntime_generate(data, prompt, args.tokens)
        rows.append({"model": name, "run": "onnxruntime (CPU)", "tokens_per_second": ref.tokens_per_second,
                     "same_tokens": True})
        if module is not None:
            dev = "cuda" if torch.cuda.is_available() else "cpu"
            toks, rate = _torch_generate(module, prompt, args.tokens, args.layers, 12, 768, dev)
            rows.append({"model": name, "run": f"PyTorch eager ({dev})", "tokens_per_second": rate,
                         "same_tokens": bool(np.array_equal(toks, ref.tokens))})
        for dev in devices:
            row: dict[str, Any] = {"model": name, "run": f"devicelayer {dev}"}
            try:
                gen = Generator(dlo.load(data), [dev], bucket=32)
                gen.generate(prompt, 4)  # the plans of the prompt and of the first bucket
                got = gen.generate(prompt, args.tokens)
                row.update(tokens_per_second=got.tokens_per_second, same_tokens=bool(np.array_equal(got.tokens,
                                                                                                  ref.tokens)),
                           prepares=got.prepares, prepare_ms=got.prepare_seconds * 1e3)
                gen.release()
            except Exception as exc:  # noqa: BLE001 - reported per device
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            rows.append(row)
            console.print(row, highlight=False)
    table = Table(title=f"greedy decoding, {args.tokens} tokens after an 8-token prompt (tokens/s)")
    for col in ("model", "run", "tokens/s", "same tokens", "plans prepared (ms)"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["model"], r["run"], f"{r['tokens_per_second']:.1f}" if "tokens_per_second" in r else
                      r.get("error", "")[:60], str(r.get("same_tokens", "-")),
                      f"{r['prepares']} ({r['prepare_ms']:.0f})" if "prepares" in r else "-")
    console.print(table)
    if args.out:
        path = write_result(args.out, "generate", {"tokens": args.tokens, "rows": rows})
        console.print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

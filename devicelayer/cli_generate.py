"""``devicelayer generate MODEL.onnx``: greedy decoding with a KV cache on a device, with a progress bar.

    devicelayer generate --bundled tiny_gpt --prompt 1,5,7,3 --tokens 64 --device vulkan:0 --check
    devicelayer generate decoder.onnx --prompt-file ids.npy --tokens 100 --json

The model takes ``input_ids`` (batch, sequence), optionally ``attention_mask`` and ``position_ids``, and its
past keys and values (inputs named ``past...``), and gives logits and the present keys and values (outputs
named ``present...``), as decoders exported from Hugging Face with ``use_cache`` do.  The prompt is token ids
(no tokenizer): ``--prompt 1,5,7`` or an .npy of shape (length,) or (batch, length).  The cache stays on the
device; its length grows in buckets of ``--bucket`` positions (0: exactly, one plan per length).
``--check`` runs the same decode on onnxruntime and compares the tokens.  Exit status: 0 when the decode
(and check) succeeded, 1 when the check failed or the device failed, 2 on bad usage or a model that cannot
be loaded.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

JSON_SCHEMA = "devicelayer.generate/1"


class UsageError(Exception):
    pass


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``generate`` subcommand to ``subparsers``."""
    p = subparsers.add_parser("generate", help="greedy decoding with a KV cache (decoder models)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", help="path of an .onnx decoder")
    p.add_argument("--bundled", metavar="NAME", help="a model shipped with devicelayer instead (tiny_gpt)")
    p.add_argument("--prompt", metavar="ID,ID,...", help="prompt token ids, comma-separated")
    p.add_argument("--prompt-file", metavar="FILE.npy",
                   help="prompt token ids from an .npy, or an .npz holding one array or one named input_ids")
    p.add_argument("--tokens", type=int, default=32, metavar="N", help="tokens to generate (default 32)")
    p.add_argument("--device", default="auto", help="device id or 'auto' (default)")
    p.add_argument("--bucket", type=int, default=32, help="cache length bucket (default 32; 0: exact lengths)")
    p.add_argument("--eos", type=int, help="stop when every sequence gives this token")
    p.add_argument("--check", action="store_true", help="compare the tokens with onnxruntime (CPU)")
    p.add_argument("--json", action="store_true", help=f"print a JSON report (schema {JSON_SCHEMA})")
    return p


def main(args: argparse.Namespace) -> int:
    """Run the subcommand; returns the exit status."""
    try:
        return _main(args)
    except UsageError as exc:
        print(f"devicelayer generate: {exc}", file=sys.stderr)
        return 2


def _prompt(args: argparse.Namespace) -> np.ndarray:
    if (args.prompt is None) == (args.prompt_file is None):
        raise UsageError("give --prompt ID,ID,... or --prompt-file FILE.npy (one of them)")
    if args.prompt is not None:
        try:
            ids = np.array([int(v) for v in args.prompt.split(",")], np.int64)
        except ValueError:
            raise UsageError(f"--prompt must be integers separated by commas, got {args.prompt!r}") from None
    else:
        from .cli_files import FileError, read_array

        try:
            ids = read_array(args.prompt_file, "input_ids", f"--prompt-file {args.prompt_file}")
        except FileError as exc:
            raise UsageError(str(exc)) from None
        if ids.dtype.kind not in "iu":
            raise UsageError(f"--prompt-file {args.prompt_file}: holds {ids.dtype}; the prompt must be integer token "
                             "ids")
    ids = ids.reshape(1, -1) if ids.ndim == 1 else ids
    if ids.ndim != 2 or ids.shape[1] == 0 or (ids < 0).any():
        raise UsageError(f"the prompt must be non-negative token ids of shape (length,) or (batch, length), got "
                         f"shape {ids.shape}")
    return ids.astype(np.int64)


def _main(args: argparse.Namespace) -> int:
    from .errors import DeviceLayerError

    if (args.model is None) == (args.bundled is None):
        raise UsageError("give a MODEL path or --bundled NAME (one of them)")
    if args.tokens < 1:
        raise UsageError("--tokens must be >= 1")
    if args.bucket < 0:
        raise UsageError("--bucket must be >= 0")
    prompt = _prompt(args)
    try:
        import onnx  # noqa: F401
    except ImportError:
        raise UsageError("devicelayer generate needs the 'onnx' package (pip install onnx)") from None
    from .onnx import bundled, load, read_model
    from .onnx.generate import Generator, onnxruntime_generate

    try:
        path = bundled(args.bundled) if args.bundled else args.model
        proto = read_model(Path(path))
        gen = Generator(load(proto), [args.device] if args.device != "auto" else "auto", bucket=args.bucket)
    except DeviceLayerError as exc:
        raise UsageError(f"cannot load {path}: {type(exc).__name__}: {exc}") from None

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console(stderr=True)
    doc: dict[str, Any] = {"schema": JSON_SCHEMA, "model": str(path), "device": args.device,
                           "prompt": prompt.tolist(), "bucket": args.bucket}
    ok = True
    with Progress(TextColumn("generating"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("generate", total=args.tokens)
        try:
            result = gen.generate(prompt, args.tokens, eos=args.eos,
                                  progress=lambda k: bar.update(task, completed=k))
        except DeviceLayerError as exc:
            doc["error"] = f"{type(exc).__name__}: {exc}"
            result = None
    if result is not None:
        doc.update({"tokens": result.tokens.tolist(), "prompt_ms": result.prompt_seconds * 1e3,
                    "tokens_per_second": result.tokens_per_second, "prepares": result.prepares,
                    "prepare_ms": result.prepare_seconds * 1e3})
        if args.check:
            try:
                ref = onnxruntime_generate(proto, prompt, result.tokens.shape[1])
            except ImportError:
                raise UsageError("--check needs onnxruntime (pip install onnxruntime)") from None
            same = bool(np.array_equal(ref.tokens, result.tokens))
            doc["check"] = {"reference": "onnxruntime", "same_tokens": same,
                            "reference_tokens_per_second": ref.tokens_per_second}
            ok = same
    else:
        ok = False
    gen.release()
    if args.json:
        json.dump(doc, sys.stdout, indent=2, default=float)
        sys.stdout.write("\n")
    elif result is not None:
        print(" ".join(str(t) for t in result.tokens[0]))
        line = (f"{result.tokens.shape[1]} tokens, {result.tokens_per_second:.1f} tokens/s after a "
                f"{result.prompt_seconds * 1e3:.1f} ms prompt; {result.prepares} plan(s) prepared in "
                f"{result.prepare_seconds * 1e3:.0f} ms")
        if "check" in doc:
            line += ("; onnxruntime gives the same tokens" if doc["check"]["same_tokens"]
                     else "; onnxruntime gives OTHER tokens")
            line += f" ({doc['check']['reference_tokens_per_second']:.1f} tokens/s)"
        console.print(line, highlight=False)
    else:
        console.print(f"devicelayer generate: {doc['error']}", highlight=False, markup=False)
    return 0 if ok else 1

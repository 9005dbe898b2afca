"""Real architectures exported by ``torch.onnx.export`` (both exporters, dynamic batch and sequence axes,
random weights: nothing downloaded), loaded once by devicelayer with no input shapes given, run on every
device at two batch sizes and two sequence lengths, and compared with onnxruntime on the same model and inputs.

    python -m benchmarks.exported_models [--family NAME ...] [--device ID ...] [--exporter torchscript|dynamo]
                                         [--opset N] [--out DIR]

Needs torch (and transformers / torchvision for the families built from them; a family whose library is
missing is reported as skipped).  Results: a table, and JSON under ``--out``.
"""

from __future__ import annotations

import argparse
import io
import time
import traceback
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from benchmarks.common import write_result
from benchmarks.torch_decoder import cached_block


@dataclass
class Family:
    """A model family: ``build()`` gives (module, input names, output names, dynamic axes per input,
    make_inputs(batch, length) -> tuple of tensors); ``lengths`` the two sequence lengths (None: fixed)."""

    name: str
    build: Callable[[], tuple]
    batches: tuple[int, int] = (1, 3)
    lengths: tuple[int, int] | None = (7, 12)
    needs: str = "transformers"
    notes: str = ""


def _torch():
    import torch

    torch.manual_seed(0)
    return torch


# -- transformers families ------------------------------------------------------------------------------------------
def _ids_and_mask(vocab: int):
    torch = _torch()

    def make(batch: int, length: int):
        g = torch.Generator().manual_seed(batch * 100 + length)
        ids = torch.randint(0, vocab, (batch, length), generator=g)
        mask = torch.ones(batch, length, dtype=torch.int64)
        if batch > 1:
            mask[-1, length // 2:] = 0  # a padded sequence: the attention mask matters
        return ids, mask
    return make


def _keywords(model: Any, names: list[str], outputs: list[str]) -> Any:
    """``model`` called with keyword arguments (transformers models take many positional parameters), returning
    the named fields of its output in order; one or two inputs, named, so both exporters see a plain signature."""
    torch = _torch()

    def fields(out: Any) -> tuple:
        return tuple(getattr(out, n) for n in outputs)

    class One(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, a):
            return fields(self.m(**{names[0]: a}))

    class Two(One):
        def forward(self, a, b):
            return fields(self.m(**{names[0]: a, names[1]: b}))
    return One() if len(names) == 1 else Two()


def bert():
    import transformers as tf

    cfg = tf.BertConfig(vocab_size=500, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=64)
    model = _keywords(tf.BertModel(cfg).eval(), ["input_ids", "attention_mask"],
                      ["last_hidden_state", "pooler_output"])
    ids_mask = _ids_and_mask(500)
    return (model, ["input_ids", "attention_mask"], ["last_hidden_state", "pooler_output"],
            {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}}, ids_mask)


def distilbert():
    import transformers as tf

    cfg = tf.DistilBertConfig(vocab_size=500, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                              max_position_embeddings=64)
    model = _keywords(tf.DistilBertModel(cfg).eval(), ["input_ids", "attention_mask"], ["last_hidden_state"])
    return (model, ["input_ids", "attention_mask"], ["last_hidden_state"],
            {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}},
            _ids_and_mask(500))


def t5_encoder():
    import transformers as tf

    cfg = tf.T5Config(vocab_size=500, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                      relative_attention_num_buckets=8, relative_attention_max_distance=32)
    model = _keywords(tf.T5EncoderModel(cfg).eval(), ["input_ids", "attention_mask"], ["last_hidden_state"])
    return (model, ["input_ids", "attention_mask"], ["last_hidden_state"],
            {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}},
            _ids_and_mask(500))


def gpt2():
    import transformers as tf

    cfg = tf.GPT2Config(vocab_size=500, n_embd=64, n_layer=2, n_head=4, n_positions=64, use_cache=False)
    model = tf.GPT2LMHeadModel(cfg).eval()
    torch = _torch()

    class Logits(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
    return (Logits(model), ["input_ids", "attention_mask"], ["logits"],
            {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}},
            _ids_and_mask(500))


def vit():
    import transformers as tf

    torch = _torch()
    cfg = tf.ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=64, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=128)
    model = _keywords(tf.ViTModel(cfg, add_pooling_layer=True).eval(), ["pixel_values"],
                      ["last_hidden_state", "pooler_output"])

    def make(batch: int, length: int):
        return (torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(batch)),)
    return model, ["pixel_values"], ["last_hidden_state", "pooler_output"], {"pixel_values": {0: "batch"}}, make


def whisper_encoder():
    import transformers as tf

    torch = _torch()
    cfg = tf.WhisperConfig(vocab_size=500, num_mel_bins=16, d_model=64, encoder_layers=2, encoder_attention_heads=4,
                           encoder_ffn_dim=128, decoder_layers=1, decoder_attention_heads=4, decoder_ffn_dim=128,
                           max_source_positions=25, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                           decoder_start_token_id=1)
    model = _keywords(tf.WhisperModel(cfg).get_encoder().eval(), ["input_features"], ["last_hidden_state"])

    def make(batch: int, length: int):
        return (torch.randn(batch, 16, 50, generator=torch.Generator().manual_seed(batch)),)
    return model, ["input_features"], ["last_hidden_state"], {"input_features": {0: "batch"}}, make


# -- torch-only families (decoder with a KV cache, YOLO-style, OCR, VAD) ------------------------------------------------
def gpt_kv():
    """A GPT-2-style decoder taking and returning its KV cache as tensors (past lengths 3 and 9)."""
    torch = _torch()
    nn = torch.nn

    Block = cached_block(torch)

    class Decoder(nn.Module):
        def __init__(self, vocab=500, d=64, h=4, layers=2, positions=64):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(positions, d)
            self.blocks = nn.ModuleList(Block(d, h) for _ in range(layers))
            self.ln = nn.LayerNorm(d)

        def forward(self, input_ids, attention_mask, position_ids, pk0, pv0, pk1, pv1):
            x = self.wte(input_ids) + self.wpe(position_ids)
            x, k0, v0 = self.blocks[0](x, pk0, pv0, attention_mask)
            x, k1, v1 = self.blocks[1](x, pk1, pv1, attention_mask)
            return self.ln(x) @ self.wte.weight.T, k0, v0, k1, v1

    def make(batch: int, past: int):
        g = torch.Generator().manual_seed(batch + past)
        ids = torch.randint(0, 500, (batch, 1), generator=g)
        cache = [torch.randn(batch, 4, past, 16, generator=g) for _ in range(4)]
        return (ids, torch.ones(batch, past + 1, dtype=torch.int64), torch.full((batch, 1), past), *cache)
    cache_axes = {0: "batch", 2: "past"}
    axes = {"input_ids": {0: "batch"}, "attention_mask": {0: "batch", 1: "total"}, "position_ids": {0: "batch"},
            "pk0": cache_axes, "pv0": cache_axes, "pk1": cache_axes, "pv1": cache_axes}
    return (Decoder().eval(), ["input_ids", "attention_mask", "position_ids", "pk0", "pv0", "pk1", "pv1"],
            ["logits", "k0", "v0", "k1", "v1"], axes, make)


def yolo():
    """A YOLO-style detector: a conv backbone with SiLU, an upsampled feature pyramid (Resize, Concat) and a head
    decoding boxes on a grid computed from the feature map's shape."""
    torch = _torch()
    nn = torch.nn

    def conv(ci, co, s=1):
        return nn.Sequential(nn.Conv2d(ci, co, 3, s, 1), nn.BatchNorm2d(co), nn.SiLU())

    class Yolo(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2, self.c3 = conv(3, 8, 2), conv(8, 16, 2), conv(16, 32, 2)
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.fuse = conv(48, 16)
            self.head = nn.Conv2d(16, 3 * 6, 1)

        def forward(self, x):
            a = self.c2(self.c1(x))
            b = self.c3(a)
            f = self.fuse(torch.cat([a, self.up(b)], 1))
            p = self.head(f)
            n, _, h, w = p.shape
            p = p.view(n, 3, 6, h, w).permute(0, 1, 3, 4, 2).sigmoid()
            gy, gx = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
            grid = torch.stack([gx, gy], -1).float()
            xy = (p[..., :2] * 2 - 0.5 + grid) * (x.shape[2] / h)
            return torch.cat([xy, p[..., 2:]], -1).reshape(n, -1, 6)

    def make(batch: int, size: int):
        return (torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(size)),)
    return Yolo().eval(), ["images"], ["detections"], {"images": {0: "batch", 2: "height", 3: "width"}}, make


def ocr():
    """A CRNN-style text recogniser: conv features, the width as the sequence, a bidirectional LSTM, logits."""
    torch = _torch()
    nn = torch.nn

    class Crnn(nn.Module):
        def __init__(self):
            super().__init__()
            self.cnn = nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2),
                                     nn.Conv2d(16, 32, 3, 1, 1), nn.ReLU(), nn.MaxPool2d((2, 1)))
            self.rnn = nn.LSTM(32 * 4, 32, bidirectional=True, batch_first=True)
            self.fc = nn.Linear(64, 40)

        def forward(self, x):
            f = self.cnn(x)
            n, c, h, w = f.shape
            seq = f.permute(0, 3, 1, 2).reshape(n, w, c * h)
            y, _ = self.rnn(seq)
            return self.fc(y).log_softmax(-1)

    def make(batch: int, width: int):
        return (torch.randn(batch, 1, 16, width, generator=torch.Generator().manual_seed(width)),)
    return Crnn().eval(), ["image"], ["logits"], {"image": {0: "batch", 3: "width"}}, make


def vad():
    """A Silero-style voice activity detector: an If on the sample rate (a scripted branch), conv features, an
    LSTM with its state in and out, a sigmoid."""
    torch = _torch()
    nn = torch.nn

    class Vad(nn.Module):
        def __init__(self):
            super().__init__()
            self.f16 = nn.Conv1d(1, 16, 8, 4)
            self.f8 = nn.Conv1d(1, 16, 4, 2)
            self.rnn = nn.LSTM(16, 16, batch_first=True)
            self.out = nn.Linear(16, 1)

        def forward(self, x, sr, h, c):
            feats = _branch(x, sr, self.f16.weight, self.f16.bias, self.f8.weight, self.f8.bias)
            y, (h2, c2) = self.rnn(feats.transpose(1, 2), (h, c))
            return torch.sigmoid(self.out(y[:, -1])), h2, c2

    def make(batch: int, samples: int):
        g = torch.Generator().manual_seed(samples)
        return (torch.randn(batch, 1, samples, generator=g), torch.tensor(16000), torch.zeros(1, batch, 16),
                torch.zeros(1, batch, 16))
    return (Vad().eval(), ["x", "sr", "h", "c"], ["prob", "h_out", "c_out"],
            {"x": {0: "batch", 2: "samples"}, "h": {1: "batch"}, "c": {1: "batch"}}, make)


def _branch(x, sr, w16, b16, w8, b8):

    return _scripted()(x, sr, w16, b16, w8, b8)


_SCRIPTED: Any = None


def _scripted():
    global _SCRIPTED
    if _SCRIPTED is None:
        import torch
        import torch.nn.functional as F

        @torch.jit.script
        def branch(x, sr, w16, b16, w8, b8):
            if bool(sr == 16000):
                y = F.conv1d(x, w16, b16, 4)
            else:
                y = F.conv1d(x, w8, b8, 2)
            return torch.relu(y)
        _SCRIPTED = branch
    return _SCRIPTED


# -- torchvision families ---------------------------------------------------------------------------------------------
def mobilenet_v3():
    import torchvision

    torch = _torch()
    model = torchvision.models.mobilenet_v3_small(weights=None).eval()

    def make(batch: int, size: int):
        return (torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(size)),)
    return model, ["images"], ["logits"], {"images": {0: "batch", 2: "height", 3: "width"}}, make


def lraspp():
    import torchvision

    torch = _torch()
    model = torchvision.models.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                                       num_classes=5).eval()

    class Out(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(x)["out"]

    def make(batch: int, size: int):
        return (torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(size)),)
    return Out(model), ["images"], ["masks"], {"images": {0: "batch", 2: "height", 3: "width"}}, make


def ssdlite():
    import torchvision

    torch = _torch()
    model = torchvision.models.detection.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                                       num_classes=5, score_thresh=0.0).eval()

    def make(batch: int, size: int):
        return (torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(size)),)
    return model, ["images"], ["boxes", "scores", "labels"], {"images": {2: "height", 3: "width"}}, make


FAMILIES = {f.name: f for f in [
    Family("bert", bert), Family("distilbert", distilbert), Family("t5_encoder", t5_encoder),
    Family("gpt2", gpt2), Family("gpt_kv", gpt_kv, lengths=(3, 9), needs="torch"),
    Family("vit", vit, lengths=None), Family("whisper_encoder", whisper_encoder, lengths=None),
    Family("mobilenet_v3", mobilenet_v3, lengths=(64, 96), needs="torchvision"),
    Family("lraspp", lraspp, lengths=(64, 96), needs="torchvision"),
    Family("ssdlite", ssdlite, batches=(1, 1), lengths=(320, 256), needs="torchvision",
           notes="one image (torchvision's detection export takes one)"),
    Family("yolo", yolo, lengths=(64, 96), needs="torch"), Family("ocr", ocr, lengths=(32, 48), needs="torch"),
    Family("vad", vad, lengths=(512, 800), needs="torch"),
]}


def export(fam: Family, exporter: str, opset: int) -> tuple[bytes, Any]:
    """The family's ONNX bytes from one exporter, and its input maker."""
    torch = _torch()
    module, ins, outs, axes, make = fam.build()
    # batch 2: an example dimension of 1 is specialised away by torch.export (its 0/1 specialisation)
    example = make(2 if fam.batches[1] > 1 else 1, fam.lengths[0] if fam.lengths else 0)
    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            torch.onnx.export(module, example, buf, input_names=ins, output_names=outs, dynamic_axes=axes,
                              opset_version=opset, dynamo=False)
            data = buf.getvalue()
        else:
            shapes = {n: {k: torch.export.Dim.AUTO for k in a} for n, a in axes.items()}
            prog = torch.onnx.export(module, example, input_names=ins, output_names=outs,
                                     dynamic_shapes=tuple(shapes.get(n, {}) for n in ins), dynamo=True,
                                     opset_version=max(opset, 18))
            data = prog.model_proto.SerializeToString()
    return data, make


def check(data: bytes, make: Any, fam: Family, devices: list[str]) -> list[dict[str, Any]]:
    """Load once; per device compile once and run every signature against onnxruntime."""
    import onnxruntime as ort

    import devicelayer.onnx as dlo

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    signatures = [(b, n) for b in fam.batches for n in (fam.lengths or (0,))]
    signatures = list(dict.fromkeys(signatures))
    feeds_list = []
    for b, n in signatures:
        arrays = [t.numpy() for t in make(b, n)]
        feeds_list.append(dict(zip(names, arrays)))
    refs = [sess.run(None, f) for f in feeds_list]
    out_names = [o.name for o in sess.get_outputs()]
    rows = []
    t0 = time.perf_counter()
    model = dlo.load(data)
    load_s = time.perf_counter() - t0
    for dev in devices:
        row: dict[str, Any] = {"device": dev, "load_s": load_s, "signatures": []}
        try:
            plan = model.compile([dev])
            for (b, n), feeds, ref in zip(signatures, feeds_list, refs):
                t0 = time.perf_counter()
                got = plan(**feeds)
                first = time.perf_counter() - t0
                errs = {}
                for name, want in zip(out_names, ref):
                    g = got[name]
                    if g.shape != want.shape:
                        errs[name] = f"shape {g.shape} != {want.shape}"
                        continue
                    scale = max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-6)
                    errs[name] = float(np.max(np.abs(g.astype(np.float64) - want))) / scale if want.size else 0.0
                ok = all(isinstance(e, float) and e <= 1e-3 for e in errs.values())
                row["signatures"].append({"batch": b, "length": n, "ok": ok, "errors": errs, "first_run_s": first})
            row["ok"] = all(s["ok"] for s in row["signatures"])
            row["cache"] = plan.cache_info()
            row["waits"] = plan.waits_report()
            plan.release()
        except Exception as exc:  # noqa: BLE001 - reported per device, the others go on
            row["ok"] = False
            row["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    import devicelayer as dl

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", action="append", help=f"one of {sorted(FAMILIES)} (repeatable; default all)")
    ap.add_argument("--device", action="append", help="device id (repeatable; default every device)")
    ap.add_argument("--exporter", action="append", choices=["torchscript", "dynamo"],
                    help="exporter (repeatable; default both)")
    ap.add_argument("--opset", type=int, default=17, help="opset of the TorchScript exporter (default 17)")
    ap.add_argument("--out", help="folder for the JSON results")
    args = ap.parse_args(argv)
    from rich.console import Console
    from rich.table import Table

    console = Console()
    devices = args.device or [d.id for d in dl.devices()]
    results = []
    for name in args.family or list(FAMILIES):
        fam = FAMILIES[name]
        for exporter in args.exporter or ["torchscript", "dynamo"]:
            entry: dict[str, Any] = {"family": name, "exporter": exporter, "opset": args.opset, "notes": fam.notes}
            try:
                __import__(fam.needs)
            except ImportError:
                entry["skipped"] = f"{fam.needs} is not installed"
                results.append(entry)
                continue
            try:
                t0 = time.perf_counter()
                data, make = export(fam, exporter, args.opset)
                entry["export_s"] = time.perf_counter() - t0
            except Exception as exc:  # noqa: BLE001 - an exporter's failure is the exporter's, reported
                entry["export_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                results.append(entry)
                continue
            try:
                entry["devices"] = check(data, make, fam, devices)
            except Exception as exc:  # noqa: BLE001
                entry["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
                entry["traceback"] = traceback.format_exc()[-1500:]
            results.append(entry)
            console.print(f"{name} ({exporter}): " + _summary(entry), highlight=False, markup=False)
    table = Table(title="exported models: devicelayer against onnxruntime (2 batches x 2 lengths)")
    table.add_column("family")
    table.add_column("exporter")
    for d in devices:
        table.add_column(d)
    for e in results:
        cells = []
        for d in devices:
            row = next((r for r in e.get("devices", []) if r["device"] == d), None)
            cells.append(_cell(e, row))
        table.add_row(e["family"], e["exporter"], *cells)
    console.print(table)
    if args.out:
        path = write_result(args.out, "exported-models", {"results": results})
        console.print(f"wrote {path}")
    return 0


def _summary(e: dict[str, Any]) -> str:
    if "skipped" in e:
        return "skipped: " + e["skipped"]
    if "export_error" in e:
        return "export failed: " + e["export_error"][:120]
    if "error" in e:
        return "error: " + e["error"][:160]
    return ", ".join(f"{r['device']} {'ok' if r['ok'] else 'FAIL ' + r.get('error', '')[:100]}" for r in e["devices"])


def _cell(e: dict[str, Any], row: dict[str, Any] | None) -> str:
    if "skipped" in e:
        return "skipped"
    if "export_error" in e:
        return "export failed"
    if row is None:
        return "error"
    if row["ok"]:
        return "ok " + " ".join(f"{s['batch']}x{s['length']}" for s in row["signatures"])
    if "error" in row:
        return "error: " + row["error"][:60]
    bad = [f"{s['batch']}x{s['length']}" for s in row["signatures"] if not s["ok"]]
    return "wrong at " + " ".join(bad)


if __name__ == "__main__":
    raise SystemExit(main())

"""Real architectures with random weights, exported to ONNX once (needs torch; torchvision and transformers for
the families built from them): what ``benchmarks.host_vs_onnxruntime`` times.

    python -m benchmarks.arch_models --models-dir DIR [--model NAME ...]

Every model is batch 1 with fixed shapes, exported by the TorchScript exporter (opset 17) to
``DIR/NAME.onnx``; nothing is downloaded.  The transformers families reuse ``benchmarks.exported_models``'s
builders; YOLOv8n and the OCR direction classifier are rebuilt here in torch (ultralytics and PaddleOCR are not
installed), layer for layer as their sources define them.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
import types
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


@dataclass(frozen=True)
class Arch:
    """A benchmark model: ``build()`` gives (torch module, example input tensors, input names)."""

    name: str
    build: Callable[[], tuple[Any, tuple, list[str]]]
    notes: str = ""


def _torch():
    import torch

    torch.manual_seed(0)
    return torch


def _torchvision():
    """torchvision's model definitions.  Its compiled ops (NMS, RoI pooling: none of these models uses them) may
    not load against the torch installed (a CUDA build of torchvision over a CPU torch); then they are skipped."""
    try:
        import torchvision
    except RuntimeError:  # "operator torchvision::nms does not exist": registering fakes for ops never loaded
        for name in [m for m in sys.modules if m.startswith("torchvision")]:
            del sys.modules[name]
        sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
        import torchvision
    return torchvision


def _transformers():
    """transformers, with torchvision made importable first where it is installed (transformers imports it, and
    a torchvision whose compiled ops do not load would make it fail)."""
    try:
        _torchvision()
    except ImportError:
        pass
    import transformers

    return transformers


def _calibrated(model: Any, size: int) -> Any:
    """``model`` with its batch norms' running statistics measured on random images (in evaluation mode).

    torchvision's random initialisation leaves every batch norm at mean 0 and variance 1: where the convolutions'
    initial scale shrinks activations (depthwise layers, initialised by their output fan), EfficientNet-B0's and
    MobileNetV2's outputs come out near 1e-14 in float32 and exactly zero in float16, and comparing two runtimes'
    outputs then checks nothing. Measured statistics keep every layer's activations near unit scale, as a
    trained model's are."""
    torch = _torch()
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return model.eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in norms:
            m.reset_running_stats()
            m.momentum = None  # (a cumulative average over the batches below)
        model.train()
        for _ in range(2):
            model(torch.randn(8, 3, size, size, generator=generator))
    return model.eval()


def _vision(name: str, size: int = 224, **kw: Any) -> Callable[[], tuple]:
    def build() -> tuple:
        torch = _torch()
        model = _calibrated(getattr(_torchvision().models, name)(weights=None, **kw), size)
        return model, (torch.randn(1, 3, size, size),), ["images"]
    return build


def _family(name: str, length: int) -> Callable[[], tuple]:
    """A ``benchmarks.exported_models`` family at batch 1 and ``length``."""
    def build() -> tuple:
        from benchmarks.exported_models import FAMILIES

        _transformers()
        module, ins, _outs, _axes, make = FAMILIES[name].build()
        return module, tuple(make(1, length)), ins
    return build


def whisper_tiny_encoder() -> tuple:
    """Whisper-tiny's encoder (d_model 384, 6 heads, 4 layers, FFN 1536, 80 mel bins) on 10 s of audio (1000
    frames, 500 positions), built from transformers' config as ``exported_models.whisper_encoder`` builds its
    smaller one."""
    tf = _transformers()

    from benchmarks.exported_models import _keywords

    torch = _torch()
    cfg = tf.WhisperConfig(vocab_size=500, num_mel_bins=80, d_model=384, encoder_layers=4, encoder_attention_heads=6,
                           encoder_ffn_dim=1536, decoder_layers=1, decoder_attention_heads=6, decoder_ffn_dim=1536,
                           max_source_positions=500, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                           decoder_start_token_id=1)
    model = _keywords(tf.WhisperModel(cfg).get_encoder().eval(), ["input_features"], ["last_hidden_state"])
    return model, (torch.randn(1, 80, 1000),), ["input_features"]


def bert_mini() -> tuple:
    """BERT-mini (hidden 256, 4 layers, 4 heads, intermediate 1024) on 128 tokens, from transformers' config."""
    tf = _transformers()

    from benchmarks.exported_models import _ids_and_mask, _keywords

    cfg = tf.BertConfig(vocab_size=500, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                        intermediate_size=1024, max_position_embeddings=512)
    model = _keywords(tf.BertModel(cfg).eval(), ["input_ids", "attention_mask"], ["last_hidden_state", "pooler_output"])
    return model, tuple(_ids_and_mask(500)(1, 128)), ["input_ids", "attention_mask"]


def gpt2_small_block() -> tuple:
    """A GPT-2 LM of 4 blocks 256 wide (4 heads) on 128 tokens, from transformers' config (``exported_models.gpt2``
    at a larger size)."""
    tf = _transformers()

    from benchmarks.exported_models import _ids_and_mask

    torch = _torch()
    cfg = tf.GPT2Config(vocab_size=500, n_embd=256, n_layer=4, n_head=4, n_positions=512, use_cache=False,
                        bos_token_id=0, eos_token_id=0)
    gpt = tf.GPT2LMHeadModel(cfg).eval()

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = gpt

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
    return Logits(), tuple(_ids_and_mask(500)(1, 128)), ["input_ids", "attention_mask"]


def ocr_classifier() -> tuple:
    """PP-OCR's text direction classifier in shape: a MobileNetV3-small-like stack at scale 0.35 on a 48x192
    text line (conv-BN-hardswish stem, depthwise separable blocks, squeeze-excite, pooled linear head), where
    every layer is tiny and a run is mostly per-node cost."""
    torch = _torch()
    nn = torch.nn

    class SE(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.c1, self.c2 = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1)
            self.act, self.gate = nn.ReLU(), nn.Hardsigmoid()

        def forward(self, x):
            return x * self.gate(self.c2(self.act(self.c1(self.pool(x)))))

    def block(ci: int, cm: int, co: int, k: int, s: int, se: bool, act: type) -> nn.Module:
        layers = [nn.Conv2d(ci, cm, 1, bias=False), nn.BatchNorm2d(cm), act(),
                  nn.Conv2d(cm, cm, k, s, k // 2, groups=cm, bias=False), nn.BatchNorm2d(cm), act()]
        if se:
            layers.append(SE(cm))
        layers += [nn.Conv2d(cm, co, 1, bias=False), nn.BatchNorm2d(co)]
        return nn.Sequential(*layers)

    class Cls(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.Hardswish())
            self.blocks = nn.Sequential(
                block(8, 8, 8, 3, 2, True, nn.ReLU), block(8, 24, 8, 3, 1, False, nn.ReLU),
                block(8, 32, 16, 5, 2, True, nn.Hardswish), block(16, 48, 16, 5, 1, True, nn.Hardswish),
                block(16, 64, 24, 5, 2, True, nn.Hardswish))
            self.last = nn.Sequential(nn.Conv2d(24, 96, 1, bias=False), nn.BatchNorm2d(96), nn.Hardswish())
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(96, 2)

        def forward(self, x):
            y = self.pool(self.last(self.blocks(self.stem(x))))
            return self.fc(y.flatten(1)).softmax(-1)

    return Cls().eval(), (torch.randn(1, 3, 48, 192),), ["x"]


def yolov8n() -> tuple:
    """YOLOv8n as ultralytics defines it (depth 0.33, width 0.25): C2f backbone, SPPF, PAN neck, the decoupled
    head with its distribution focal loss decoding and anchors, 80 classes, at 640x640."""
    torch = _torch()
    nn = torch.nn

    class Conv(nn.Module):
        def __init__(self, ci: int, co: int, k: int = 1, s: int = 1) -> None:
            super().__init__()
            self.conv, self.bn, self.act = nn.Conv2d(ci, co, k, s, k // 2, bias=False), nn.BatchNorm2d(co), nn.SiLU()

        def forward(self, x):
            return self.act(self.bn(self.conv(x)))

    class Bottleneck(nn.Module):
        def __init__(self, c: int, shortcut: bool) -> None:
            super().__init__()
            self.cv1, self.cv2, self.add = Conv(c, c, 3), Conv(c, c, 3), shortcut

        def forward(self, x):
            y = self.cv2(self.cv1(x))
            return x + y if self.add else y

    class C2f(nn.Module):
        def __init__(self, ci: int, co: int, n: int, shortcut: bool) -> None:
            super().__init__()
            self.c = co // 2
            self.cv1, self.cv2 = Conv(ci, 2 * self.c), Conv((2 + n) * self.c, co)
            self.m = nn.ModuleList(Bottleneck(self.c, shortcut) for _ in range(n))

        def forward(self, x):
            y = list(self.cv1(x).chunk(2, 1))
            y.extend(m(y[-1]) for m in self.m)
            return self.cv2(torch.cat(y, 1))

    class SPPF(nn.Module):
        def __init__(self, ci: int, co: int) -> None:
            super().__init__()
            self.cv1, self.cv2 = Conv(ci, ci // 2), Conv(ci // 2 * 4, co)
            self.m = nn.MaxPool2d(5, 1, 2)

        def forward(self, x):
            y = [self.cv1(x)]
            y.extend(self.m(y[-1]) for _ in range(3))
            return self.cv2(torch.cat(y, 1))

    class Detect(nn.Module):
        def __init__(self, nc: int, ch: tuple[int, ...]) -> None:
            super().__init__()
            self.nc, self.reg = nc, 16
            c2, c3 = max(16, ch[0] // 4, self.reg * 4), max(ch[0], min(nc, 100))
            self.cv2 = nn.ModuleList(nn.Sequential(Conv(x, c2, 3), Conv(c2, c2, 3), nn.Conv2d(c2, 4 * self.reg, 1))
                                     for x in ch)
            self.cv3 = nn.ModuleList(nn.Sequential(Conv(x, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, nc, 1)) for x in ch)
            self.dfl = nn.Conv2d(self.reg, 1, 1, bias=False).requires_grad_(False)
            self.dfl.weight.data[:] = torch.arange(self.reg, dtype=torch.float32).view(1, self.reg, 1, 1)
            self.strides = (8, 16, 32)

        def forward(self, xs):
            b = xs[0].shape[0]
            feats = [torch.cat((self.cv2[i](x), self.cv3[i](x)), 1) for i, x in enumerate(xs)]
            anchors, strides = [], []
            for f, s in zip(feats, self.strides):
                h, w = f.shape[2:]
                sy, sx = torch.meshgrid(torch.arange(h, device=f.device) + 0.5, torch.arange(w, device=f.device) + 0.5,
                                        indexing="ij")
                anchors.append(torch.stack((sx, sy), -1).view(-1, 2))
                strides.append(torch.full((h * w, 1), float(s), device=f.device))
            anchors_t, strides_t = torch.cat(anchors).transpose(0, 1), torch.cat(strides).transpose(0, 1)
            x = torch.cat([f.view(b, 4 * self.reg + self.nc, -1) for f in feats], 2)
            box, cls = x.split((4 * self.reg, self.nc), 1)
            a = box.shape[-1]
            dist = self.dfl(box.view(b, 4, self.reg, a).transpose(2, 1).softmax(1)).view(b, 4, a)
            lt, rb = dist.chunk(2, 1)
            x1y1, x2y2 = anchors_t.unsqueeze(0) - lt, anchors_t.unsqueeze(0) + rb
            dbox = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * strides_t
            return torch.cat((dbox, cls.sigmoid()), 1)

    class YoloV8n(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.b0, self.b1, self.b2 = Conv(3, 16, 3, 2), Conv(16, 32, 3, 2), C2f(32, 32, 1, True)
            self.b3, self.b4 = Conv(32, 64, 3, 2), C2f(64, 64, 2, True)
            self.b5, self.b6 = Conv(64, 128, 3, 2), C2f(128, 128, 2, True)
            self.b7, self.b8, self.b9 = Conv(128, 256, 3, 2), C2f(256, 256, 1, True), SPPF(256, 256)
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.h12, self.h15 = C2f(384, 128, 1, False), C2f(192, 64, 1, False)
            self.h16, self.h18 = Conv(64, 64, 3, 2), C2f(192, 128, 1, False)
            self.h19, self.h21 = Conv(128, 128, 3, 2), C2f(384, 256, 1, False)
            self.detect = Detect(80, (64, 128, 256))

        def forward(self, x):
            p4 = self.b4(self.b3(self.b2(self.b1(self.b0(x)))))
            p6 = self.b6(self.b5(p4))
            p9 = self.b9(self.b8(self.b7(p6)))
            h12 = self.h12(torch.cat((self.up(p9), p6), 1))
            h15 = self.h15(torch.cat((self.up(h12), p4), 1))
            h18 = self.h18(torch.cat((self.h16(h15), h12), 1))
            h21 = self.h21(torch.cat((self.h19(h18), p9), 1))
            return self.detect([h15, h18, h21])

    return YoloV8n().eval(), (torch.randn(1, 3, 640, 640),), ["images"]


ARCHS = {a.name: a for a in [
    Arch("resnet18", _vision("resnet18")),
    Arch("squeezenet", _vision("squeezenet1_1"), "SqueezeNet 1.1"),
    Arch("densenet121", _vision("densenet121")),
    Arch("regnet_y_400mf", _vision("regnet_y_400mf")),
    Arch("shufflenet_v2", _vision("shufflenet_v2_x1_0")),
    Arch("googlenet", _vision("googlenet", aux_logits=False, init_weights=True)),
    Arch("inception_v3", _vision("inception_v3", 299, aux_logits=False, init_weights=True), "299x299"),
    Arch("mobilenet_v2", _vision("mobilenet_v2")),
    Arch("efficientnet_b0", _vision("efficientnet_b0")),
    Arch("convnext_tiny", _vision("convnext_tiny")),
    Arch("whisper_encoder", whisper_tiny_encoder, "Whisper-tiny's encoder, 80 mel bins x 1000 frames"),
    Arch("bert", bert_mini, "BERT-mini: hidden 256, 4 layers, 128 tokens"),
    Arch("gpt2", gpt2_small_block, "GPT-2 LM: 256 wide, 4 layers, 128 tokens"),
    Arch("whisper_encoder_64", _family("whisper_encoder", 0),
         "exported_models' Whisper encoder: d_model 64, 2 layers, 16 mel bins x 50 frames (per-node cost)"),
    Arch("bert_64", _family("bert", 32), "exported_models' BERT: hidden 64, 2 layers, 32 tokens (per-node cost)"),
    Arch("ocr_classifier", ocr_classifier, "PP-OCR direction classifier in shape, 3x48x192"),
    Arch("crnn", _family("ocr", 128), "exported_models' CRNN recogniser (conv + BiLSTM), 1x16x128"),
    Arch("yolov8n", yolov8n, "YOLOv8n layer for layer (ultralytics not installed), 640x640"),
]}


def export(arch: Arch, path: Path, opset: int = 17) -> float:
    """Build ``arch`` and write its ONNX file to ``path``; the seconds it took."""
    torch = _torch()
    t0 = time.perf_counter()
    module, example, names = arch.build()
    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, example, buf, input_names=names, opset_version=opset, dynamo=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".onnx.tmp")
    tmp.write_bytes(buf.getvalue())
    tmp.replace(path)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-dir", required=True, help="folder of the ONNX files")
    ap.add_argument("--model", action="append", help=f"one of {sorted(ARCHS)} (repeatable; default all)")
    ap.add_argument("--force", action="store_true", help="export again where a file exists")
    args = ap.parse_args(argv)
    for name in args.model or list(ARCHS):
        path = Path(args.models_dir) / f"{name}.onnx"
        if path.exists() and not args.force:
            print(f"{name}: {path} exists")
            continue
        try:
            print(f"{name}: exported in {export(ARCHS[name], path):.1f} s to {path}", flush=True)
        except Exception as exc:  # noqa: BLE001 - one model's failure is reported, the others go on
            print(f"{name}: export failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""ONNX Resize: common configurations (feature-map upsampling in segmentation and detection models, an
antialiased downsampling) loaded through the ONNX front end, on each device against onnxruntime (CPU), timed
in alternation in the same run; inputs from and outputs back on the host for both."""

from __future__ import annotations

from typing import Any

import numpy as np

from .models import _paired_ms

TITLE = "ONNX Resize (ms per call, median; ratio = devicelayer / onnxruntime)"

#: (name, input shape, attributes, scales or None, sizes or None, opset)
CONFIGS: list[tuple[str, tuple[int, ...], dict[str, Any], list[float] | None, list[int] | None, int]] = [
    ("nearest x2 (PyTorch)", (1, 64, 64, 64), {"coordinate_transformation_mode": "asymmetric",
                                              "nearest_mode": "floor"}, [1, 1, 2, 2], None, 13),
    ("linear x2 half_pixel", (1, 64, 64, 64), {"mode": "linear"}, [1, 1, 2, 2], None, 13),
    ("linear x2 align_corners", (1, 64, 64, 64), {"mode": "linear", "coordinate_transformation_mode":
                                                  "align_corners"}, None, [1, 64, 128, 128], 13),
    ("cubic x2 half_pixel", (1, 64, 64, 64), {"mode": "cubic"}, [1, 1, 2, 2], None, 13),
    ("linear /2 antialias", (1, 32, 128, 128), {"mode": "linear", "antialias": 1}, None, [1, 32, 64, 64], 18),
]


def _model(shape, attrs, scales, sizes, opset):
    from onnx import helper

    from devicelayer.onnx.testing import make_model

    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    inits = {"scales": np.array(scales, np.float32)} if scales is not None else {"sizes": np.array(sizes, np.int64)}
    ins = ["x", "", "scales"] if scales is not None else ["x", "", "", "sizes"]
    return make_model([helper.make_node("Resize", ins, ["y"], **attrs)], {"x": x}, ["y"], inits, opset), x


def run(devices, quick: bool = False) -> list[dict]:
    """One row per device and configuration."""
    try:
        import onnxruntime as ort
    except ImportError:
        return []
    import devicelayer.onnx as dlo

    repeat = 5 if quick else 25
    rows = []
    for name, shape, attrs, scales, sizes, opset in CONFIGS:
        model, x = _model(shape, attrs, scales, sizes, opset)
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        want = session.run(None, {"x": x})[0]
        for dev in devices:
            plan = dlo.load(model).compile([dev.id])
            try:
                got = plan(x=x)["y"]
                error = float(np.max(np.abs(got - want)))
                ours, peer = _paired_ms(lambda p=plan, a=x: p(x=a), lambda s=session, a=x: s.run(None, {"x": a}), repeat)
            finally:
                plan.release()
            rows.append({"name": f"{name} {dev.id}", "resize": name, "device": dev.id, "shape": str(shape),
                         "devicelayer_ms": ours, "onnxruntime_ms": peer, "ratio": ours / peer,
                         "max_abs_error": error})
    return rows

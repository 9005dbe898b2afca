"""The ONNX front end: ``devicelayer.onnx.load(model) -> OnnxModel``, an ONNX ``Backend``, bundled models.

>>> model = devicelayer.onnx.load("model.onnx")       # symbolic dimensions stay symbolic
>>> plan = model.compile(["opencl:0"])                 # specialised per signature of input shapes
>>> plan(x=array)
"""

from __future__ import annotations

from typing import Any

from .loader import convert, load, read_model
from .model import OnnxModel

__all__ = ["load", "convert", "read_model", "OnnxModel", "bundled", "backend"]


def bundled(name: str = "tiny_cnn") -> str:
    """Path of a model shipped with devicelayer (``tiny_cnn``); built on first use if the file is missing."""
    from .models import bundled_path

    return str(bundled_path(name))


def __getattr__(name: str) -> Any:
    if name == "backend":
        import importlib
        return importlib.import_module(".backend", __name__)
    raise AttributeError(f"module 'devicelayer.onnx' has no attribute {name!r}")

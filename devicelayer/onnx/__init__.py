"""The ONNX front end: ``devicelayer.onnx.load(model) -> OnnxModel``, an onnxruntime-compatible
``InferenceSession``, an ONNX ``Backend``, bundled models.

>>> model = devicelayer.onnx.load("model.onnx")       # symbolic dimensions stay symbolic
>>> plan = model.compile(["opencl:0"])                 # specialised per signature of input shapes
>>> plan(x=array)

>>> import devicelayer.onnx as ort                     # code written for onnxruntime, one import changed
>>> sess = ort.InferenceSession("model.onnx", providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
>>> sess.run(None, {"x": array})
"""

from __future__ import annotations

from typing import Any

from .loader import convert, load, read_model
from .model import OnnxModel

__all__ = ["load", "convert", "read_model", "OnnxModel", "bundled", "backend", "InferenceSession", "SessionOptions",
           "RunOptions", "GraphOptimizationLevel", "ExecutionMode", "NodeArg", "ModelMetadata", "IOBinding",
           "get_available_providers", "get_all_providers", "get_device"]

_SESSION = {"InferenceSession", "SessionOptions", "RunOptions", "GraphOptimizationLevel", "ExecutionMode", "NodeArg",
            "ModelMetadata", "get_available_providers", "get_all_providers", "get_device"}


def bundled(name: str = "tiny_cnn") -> str:
    """Path of a model shipped with devicelayer (``tiny_cnn``); built on first use if the file is missing."""
    from .models import bundled_path

    return str(bundled_path(name))


def __getattr__(name: str) -> Any:
    if name in _SESSION:
        from . import session

        return getattr(session, name)
    if name == "IOBinding":
        from .iobinding import IOBinding

        return IOBinding
    if name == "backend":
        import importlib
        return importlib.import_module(".backend", __name__)
    raise AttributeError(f"module 'devicelayer.onnx' has no attribute {name!r}")

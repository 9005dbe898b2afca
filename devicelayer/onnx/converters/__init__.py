"""ONNX op converters, one module per op family (as ``devicelayer/kernels/ops/``); importing this package
registers every converter in ``CONVERTERS`` and every load-time evaluator in ``FOLDERS``."""

from . import binary, control, elementwise, generators, linalg, movement, normalization, reduce  # noqa: F401
from . import folding, resize, sequence  # noqa: F401
from .base import CONVERTERS, FOLDERS, converter

__all__ = ["CONVERTERS", "FOLDERS", "converter"]

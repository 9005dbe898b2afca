"""ONNX op converters, one module per op family (as ``devicelayer/kernels/ops/``); importing this package
registers every converter in ``CONVERTERS`` and every load-time evaluator in ``FOLDERS``."""

from .base import CONVERTERS, FOLDERS, converter  # noqa: F401
from . import binary, elementwise, generators, linalg, logic, movement, normalization, reduce, resize  # noqa: F401,E402

__all__ = ["CONVERTERS", "FOLDERS", "converter"]

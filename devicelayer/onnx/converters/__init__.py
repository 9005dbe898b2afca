"""ONNX op converters, one module per op family (as ``devicelayer/kernels/ops/``); importing this package
registers every converter in ``CONVERTERS`` and every load-time evaluator in ``FOLDERS``."""

from . import binary, control, detection, elementwise, generators, linalg, logic, movement  # noqa: F401
from . import attention, folding, generate, indexing, losses, normalization, reduce, resize, rnn  # noqa: F401
from . import einsum, image, quantize, select, sequence, signal  # noqa: F401
from .base import CONVERTERS, FOLDERS, converter

__all__ = ["CONVERTERS", "FOLDERS", "converter"]

"""ONNX op converters, one module per op family (as ``devicelayer/kernels/ops/``); importing this package
registers every converter in ``CONVERTERS`` and every load-time evaluator in ``FOLDERS``."""

from . import binary, control, detection, elementwise, generators, linalg, movement, normalization  # noqa: F401
from . import attention, folding, generate, indexing, losses, reduce, resize, rnn, select, sequence  # noqa: F401
from . import einsum, image, quantize, signal  # noqa: F401
from .base import CONVERTERS, FOLDERS, converter

__all__ = ["CONVERTERS", "FOLDERS", "converter"]

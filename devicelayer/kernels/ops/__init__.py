"""The op library: importing this package registers every op."""

from . import binary, conv, elementwise, linalg, matmul, movement, normalization, pooling, quantize, reduce  # noqa: F401

"""The op library: importing this package registers every op."""

from . import binary, conv, elementwise, image, linalg, matmul, movement, normalization, pooling, quantize, reduce  # noqa: F401

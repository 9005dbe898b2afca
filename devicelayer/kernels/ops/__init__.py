"""The op library: importing this package registers every op."""

from . import binary, conv, elementwise, losses, matmul, movement, normalization, pooling, reduce  # noqa: F401

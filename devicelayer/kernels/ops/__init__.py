"""The op library: importing this package registers every op."""

from . import binary, cast, conv, elementwise, logic, matmul, movement, normalization, pooling, reduce  # noqa: F401

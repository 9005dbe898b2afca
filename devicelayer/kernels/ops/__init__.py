"""The op library: importing this package registers every op."""

from . import binary, conv, elementwise, matmul, movement, normalization, pooling, reduce  # noqa: F401
from . import generate, indexing, scan, select  # noqa: F401

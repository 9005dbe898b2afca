"""The op library: importing this package registers every op."""

from . import binary, conv, elementwise, matmul, movement, normalization, pooling, reduce  # noqa: F401
from . import image, linalg, quantize  # noqa: F401,E402

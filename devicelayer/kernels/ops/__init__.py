"""The op library: importing this package registers every op."""

from . import binary, cast, conv, elementwise, logic, matmul, movement, normalization, pooling, reduce  # noqa: F401
from . import attention, generate, indexing, linear_attention, losses, random, rnn, rotary, scan  # noqa: F401
from . import image, linalg, quantize, select  # noqa: F401
from . import fused  # noqa: F401  (after the pointwise ops it composes)

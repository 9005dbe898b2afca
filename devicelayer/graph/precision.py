"""Precision a plan allows beyond the ops' own: TF32 for float32 products and convolutions (``compile(...,
allow_tf32=True)``).

TF32 multiplies with a 10-bit mantissa and sums in float32, where a device has units for it (CUDA's tensor
cores through cuBLAS and cuDNN): several times the float32 rate, results about 1e-3 relative off IEEE float32.
A plan allowing it gives each float32 ``matmul``, ``gemm``, ``conv`` and ``conv_transpose`` node the op
attribute ``allow_tf32``; kernels and devices without such units compute IEEE float32 as before.
"""

from __future__ import annotations

import numpy as np

from ..kernels.op import ALLOW_TF32
from .fold import rebuild
from .ir import Graph

#: the ops that take ``allow_tf32``
TF32_OPS = frozenset({"matmul", "gemm", "conv", "conv_transpose"})


def allow_tf32(graph: Graph) -> Graph:
    """A copy of ``graph`` whose float32 products and convolutions may run TF32 (the graph itself where it has
    none)."""
    nodes = graph.needed()
    marked = {id(n): (None, {ALLOW_TF32: True}, n, []) for n in nodes
              if n.op in TF32_OPS and n.inputs and n.inputs[0].dtype == np.float32}
    return rebuild(graph, nodes, set(), marked) if marked else graph

"""One launch for several pieces along an axis: split's outputs written, or concat's inputs read, by one kernel.

A tensor of shape (outer, dim, inner) around the axis and its pieces (outer, s_j, inner) are walked over a run of
the axis ``[base, base + span)`` that up to ``PIECES`` pieces cover: work item i is element (o, a, w) of the run,
and an if-chain over the pieces' ends picks the piece that holds position ``a``.  Elements move as bits (the
copy kernel's types).  A split or concat of more pieces takes one launch per ``PIECES`` of them.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ...errors import UnsupportedOp
from ...info import DeviceInfo
from ..dialect import KernelSpec, Param
from ..op import Launch, groups_for, local_1d

#: pieces one launch moves (buffers a kernel binds: these and the whole tensor)
PIECES = 8
_INT_MAX = 2**31 - 1


def _spec(ct: str, k: int, gather: bool) -> KernelSpec:
    """The kernel of ``k`` pieces moving ``ct`` bits: ``gather`` reads the pieces into the whole (concat), else
    the whole is read into the pieces (split)."""
    lines = ["    FOR_EACH(i, n) {\n        int w = i % inner;\n        int t = i / inner;\n",
             "        int a = t % span;\n        int o = t / span;\n",
             "        int at = (o * dim + base + a) * inner + w;\n"]
    for j in range(k):
        start = f" - e{j - 1}" if j else ""
        piece = f"(o * s{j} + a{start}) * inner + w"
        move = f"whole[at] = p{j}[{piece}];" if gather else f"p{j}[{piece}] = whole[at];"
        lines.append(f"        {'if' if j == 0 else 'else if'} (a < e{j}) {{ {move} }}\n")
    lines.append("    }")
    if gather:
        buffers = [Param(f"p{j}", ct, "in") for j in range(k)] + [Param("whole", ct, "out")]
    else:
        buffers = [Param("whole", ct, "in")] + [Param(f"p{j}", ct, "out") for j in range(k)]
    scalars = [Param(name, "int", "scalar") for name in ("n", "inner", "span", "dim", "base")]
    scalars += [Param(f"s{j}", "int", "scalar") for j in range(k)] + [Param(f"e{j}", "int", "scalar")
                                                                      for j in range(k)]
    return KernelSpec(f"pieces_{'concat' if gather else 'split'}{k}_{ct}", tuple(buffers + scalars),
                      "".join(lines), elem=ct)


def piece_launches(ct: str, whole: Sequence[int], axis: int, sizes: Sequence[int], gather: bool,
                   info: DeviceInfo, who: str) -> list[Launch]:
    """The launches moving the pieces of ``sizes`` along ``axis`` of a tensor of shape ``whole`` (``ct``: the
    copy type); piece j is input j (``gather``, concat) or output j (split), the whole the op's other tensor.
    Empty pieces take no part; UnsupportedOp where an index would pass int32."""
    shape = [int(d) for d in whole]
    if int(np.prod(shape, dtype=np.int64)) > _INT_MAX:
        raise UnsupportedOp(f"{who}: more than 2**31 - 1 elements exceed the kernel's int32 indexing")
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    dim = shape[axis]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int)
    kept = [j for j, s in enumerate(sizes) if s > 0 and outer and inner]
    local = local_1d(info)
    launches = []
    for first in range(0, len(kept), PIECES):
        group = kept[first:first + PIECES]
        base = int(starts[group[0]])
        span = int(starts[group[-1]] + sizes[group[-1]]) - base
        n = outer * span * inner
        ends = [int(starts[j] + sizes[j]) - base for j in group]
        pieces = [("in" if gather else "out", j) for j in group]
        whole_arg = ("out", 0) if gather else ("in", 0)
        buffers = pieces + [whole_arg] if gather else [whole_arg] + pieces
        args = (*buffers, n, inner, span, dim, base, *[int(sizes[j]) for j in group], *ends)
        launches.append(Launch(_spec(ct, len(group), gather), args, groups_for(n, local, info), (local,)))
    return launches


__all__ = ["piece_launches", "PIECES"]

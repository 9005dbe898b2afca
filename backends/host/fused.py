"""Large float32 chains of elementwise steps on the host as one oneDNN primitive with post-ops.

A ``fused_elementwise`` node's NumPy form runs each step over blocks of the tensor, the blocks spread over the
host's helper threads.  On the 2-core VM each hand-off to a helper costs tens of microseconds and each step a
Python call a block: ConvNeXt-T's layer scale and residual addition (a ``mul`` then an ``add`` over 301056
elements) took 780-1380 us that way, timed alone, against 330-530 us for NumPy's two whole-tensor passes and
210-230 us as one oneDNN primitive.  So a chain whose output is too large to run on the calling thread alone (``eltwise.is_small``)
runs as one oneDNN primitive on the OpenMP team the convolutions and products use, reading the tensor once:

- its first step a binary op (``add``, ``sub``, ``mul``, ``div``) of two inputs, one of the output's shape (oneDNN's
  first source; the other broadcast along its axes of one element), or a unary op oneDNN computes as NumPy does
  (``gemm.POST_ELTWISE``) of an input of the output's shape;
- every later step a post-op reading the step before once: a unary op of the same kind, or a binary op of the
  step before and an input (the step before first where the order matters), so ``x * sigmoid(x)`` is one;
- every tensor float32, the chain's one output its last step, or a ``cast`` of its last float32 step (NumPy casts
  the primitive's result, written to a temporary, into the output: YOLOv8's sigmoid of 672000 scores to float64
  took 2.6 ms as NumPy's blocks and 0.75 ms so).

Anything else (a step reading an earlier step than the one before, or the one before twice; an intermediate
output; other dtypes; an output overlapping an input other than exactly as the first source; a broadcast oneDNN
builds no primitive for) runs the NumPy form.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from . import dnnl as host_dnnl
from .backend import HostVendor
from .binary import ALGORITHMS as BINARY
from .dnnl_layers import ChainLayer
from .eltwise import ALGORITHMS as ELTWISE, cached_layer, is_small, reference_call
from .gemm import POST_ELTWISE
from .stretch import team_call


def padded(shape: Sequence[int], rank: int) -> tuple[int, ...]:
    """``shape`` with leading ones to ``rank`` dimensions."""
    return (1,) * (rank - len(shape)) + tuple(shape)


def chain_form(ins: Sequence[Any], outs: Sequence[Any], attrs: dict) -> tuple[tuple, tuple, tuple[int, ...],
                                                                            dict | None] | None:
    """The chain as (first step, post-ops, the input each oneDNN source reads in order: the first step's, then
    each binary post-op's, and the attributes of a last ``cast`` NumPy applies after them, or None) for
    ``ChainLayer``; None where it is not one (see the module)."""
    steps, y = attrs["steps"], outs[0]
    rank, n_in = len(y.shape), len(ins)
    if tuple(attrs["outputs"]) != (len(steps) - 1,) or rank == 0:
        return None
    cast = None
    if len(steps) > 1 and steps[-1][0] == "cast" and tuple(steps[-1][2]) == (n_in + len(steps) - 2,):
        steps, cast = steps[:-1], steps[-1][1]
    elif y.dtype not in host_dnnl.DTYPES:
        return None
    if any(t.dtype not in host_dnnl.DTYPES for t in ins):
        return None
    name, step_attrs, operands = steps[0]
    if name in BINARY and len(operands) == 2 and all(j < n_in for j in operands):
        alg, swaps = BINARY[name]
        i, j = operands
        if tuple(ins[i].shape) != tuple(y.shape):
            if not swaps or tuple(ins[j].shape) != tuple(y.shape):
                return None
            i, j = j, i
        first: tuple = ("binary", alg, padded(ins[j].shape, rank))
        reads = [i, j]
    elif name in POST_ELTWISE and len(operands) == 1 and operands[0] < n_in \
            and tuple(ins[operands[0]].shape) == tuple(y.shape):
        alg, params = ELTWISE[name]
        alpha, beta = params(step_attrs)
        first, reads = ("eltwise", alg, float(alpha), float(beta)), [operands[0]]
    else:
        return None
    post: list[tuple] = []
    for k, (name, step_attrs, operands) in enumerate(steps[1:], 1):
        running = n_in + k - 1
        if name in POST_ELTWISE and tuple(operands) == (running,):
            alg, params = ELTWISE[name]
            alpha, beta = params(step_attrs)
            post.append(("eltwise", alg, float(alpha), float(beta)))
            continue
        if name not in BINARY or len(operands) != 2 or list(operands).count(running) != 1:
            return None
        alg, swaps = BINARY[name]
        other = operands[1] if operands[0] == running else operands[0]
        if (operands[1] == running and not swaps) or other >= n_in or len(ins[other].shape) > rank:
            return None
        post.append(("binary", alg, padded(ins[other].shape, rank)))
        reads.append(other)
    return first, tuple(post), tuple(reads), cast


class OnednnFused(HostVendor):
    """``fused_elementwise`` of large float32 tensors as one oneDNN primitive with post-ops (see the module)."""

    def route(self, ins: Any, outs: Any, attrs: dict) -> tuple[ChainLayer, tuple[int, ...], dict | None] | None:
        """The layer running this chain (built once per geometry and steps), the input each of its sources reads
        and a last cast's attributes (``chain_form``), None where NumPy runs it."""
        y = outs[0]
        if is_small(y.size):
            return None
        form = chain_form(ins, outs, attrs)
        if form is None:
            return None
        first, post, reads, cast = form
        shape = tuple(y.shape)
        layer = cached_layer(self.dev, (self.name, (shape, first, post), ()), lambda: ChainLayer(shape, first, post),
                             y.size)
        return None if layer is None else (layer, reads, cast)

    def accepts(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Large float32 chains oneDNN expresses as one primitive and builds it for."""
        return self.route(ins, outs, attrs) is not None

    def bind(self, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any) -> Callable[[], None]:
        """The chain on these buffers as a call on the OpenMP team, a last cast after it from a float32 temporary
        of the call's own (the op's NumPy reference, computed apart, where the output overlaps an input other than
        exactly as the first source)."""
        pool = self.dev.pool
        u = outs[0]
        views = [pool._bytes(b)[:t.size * 4] for b, t in zip(in_bufs, ins)]
        y = pool._bytes(out_bufs[0])[:u.size * u.dtype.itemsize]
        out = y.view(u.dtype).reshape(u.shape)
        found = self.route(ins, outs, attrs)
        if found is not None:
            layer, reads, cast = found
            first, rest = views[reads[0]], [views[j] for j in reads[1:]]
            target = y if cast is None else np.empty(u.size, np.float32)  # (a cast reads the chain's whole result)
            if cast is not None or (not any(np.may_share_memory(v, y) for v in rest)
                                    and (first.ctypes.data == y.ctypes.data or not np.may_share_memory(first, y))):
                call = layer.bind(first.ctypes.data, [v.ctypes.data for v in rest], target.ctypes.data,
                                  keep=(views, target))
                if cast is None:
                    return team_call(call, True)
                from devicelayer.kernels.op import get

                then = get("cast").bind_into([target.reshape(u.shape)], [out], cast)

                def chain_then_cast() -> None:
                    call()
                    then()
                return team_call(chain_then_cast, True)
        arrays = [v.view(np.float32).reshape(t.shape) for v, t in zip(views, ins)]
        return reference_call(self.name, arrays, out, attrs)

"""Large float32 chains of elementwise steps on the host as one oneDNN primitive with post-ops.

A ``fused_elementwise`` node's NumPy form runs each step over blocks of the tensor, the blocks spread over the
host's helper threads.  On the 2-core VM each hand-off to a helper costs tens of microseconds and each step a
Python call a block: ConvNeXt-T's layer scale and residual addition (a ``mul`` then an ``add`` over 301056
elements) took 780-1380 us that way, timed alone, against 330-530 us for NumPy's two whole-tensor passes and
210-230 us as one oneDNN primitive.  So a chain whose output is too large to run on the calling thread alone (``eltwise.is_small``)
runs as one oneDNN primitive on the OpenMP team the convolutions and products use, reading the tensor once:

- its first step a binary op (``add``, ``sub``, ``mul``, ``div``) of two inputs, one of the output's shape (oneDNN's
  first source; the other broadcast along its axes of one element), or a unary op oneDNN computes as NumPy does
  (``gemm.POST_ELTWISE``) of an input of the output's shape (a post-op of that input times one: oneDNN 3.2's
  eltwise primitive takes post-ops only in its reference form);
- every later step a post-op reading the step before once: a unary op of the same kind, or a binary op of the
  step before and an input (the step before first where the order matters), so ``x * sigmoid(x)`` is one;
- every tensor float32, the chain's one output its last step, or a ``cast`` of its last float32 step (NumPy casts
  the primitive's result, written to a temporary, into the output: YOLOv8's sigmoid of 672000 scores to float64
  took 2.6 ms as NumPy's blocks and 0.75 ms so).

Anything else (a step reading an earlier step than the one before, or the one before twice; an intermediate
output; other dtypes; an output overlapping an input other than exactly as the first source; a broadcast oneDNN
builds only its reference form for, which is slower than NumPy's: a post-op's operand other than one element, a
channel's or the whole tensor, such as a row (1, 1, W)) runs the NumPy form.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from . import dnnl as host_dnnl
from .backend import HostVendor
from .binary import ALGORITHMS as BINARY, logical
from .dnnl_layers import ChainLayer
from .dnnl_op import OnednnOp
from .eltwise import ALGORITHMS as ELTWISE, cached_layer, is_small, reference_call
from .gemm import POST_ELTWISE, post_op
from .stretch import team_call
from .transpose import strided_reorder


#: the operand a chain's sources read for the constant one (``chain_form``)
ONE = -1
_ONE = np.ones(1, np.float32)
_ONE.flags.writeable = False


def padded(shape: Sequence[int], rank: int) -> tuple[int, ...]:
    """``shape`` with leading ones to ``rank`` dimensions."""
    return (1,) * (rank - len(shape)) + tuple(shape)


def chain_form(ins: Sequence[Any], outs: Sequence[Any], attrs: dict) -> tuple[tuple, tuple, tuple[int, ...],
                                                                            dict | None] | None:
    """The chain as (first step, post-ops, the input each oneDNN source reads in order: the first step's, then
    each binary post-op's, ``ONE`` for the constant one, and the attributes of a last ``cast`` NumPy applies after
    them, or None) for ``ChainLayer``; None where it is not one (see the module)."""
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
        reads, post = [i, j], []
    elif name in POST_ELTWISE and len(operands) == 1 and operands[0] < n_in \
            and tuple(ins[operands[0]].shape) == tuple(y.shape):
        alg, params = ELTWISE[name]
        alpha, beta = params(step_attrs)
        # (oneDNN's eltwise primitive takes post-ops only in its reference form: the step is a post-op of x * 1)
        first, reads = ("binary", BINARY["mul"][0], (1,) * rank), [operands[0], ONE]
        post = [("eltwise", alg, float(alpha), float(beta))]
    else:
        return None
    for k, step in enumerate(steps[1:], 1):
        found = post_op(step, n_in + k - 1, lambda j: ins[j] if 0 <= j < n_in else None, rank)
        if found is None:
            return None
        post.append(found[0])
        if found[1] is not None:
            reads.append(found[1])
    return first, tuple(post), tuple(reads), cast


def _with_strides(first: tuple, post: Sequence[tuple], reads: Sequence[int], ins: Sequence[Any], y: Any,
                  in_last: frozenset[int]) -> tuple[tuple, tuple]:
    """``first`` and ``post`` with each binary tensor's strides: channels-last where the input is in ``in_last``
    and has the output's shape (a broadcast input's memory is one in both layouts), else row-major."""
    rank = len(y.shape)
    tensors = iter(reads[1:])

    def strided(step: tuple) -> tuple:
        if step[0] != "binary":
            return step
        j = next(tensors)
        last = j != ONE and j in in_last and padded(ins[j].shape, rank) == tuple(y.shape)
        shape = step[2]
        return (*step[:3], host_dnnl.last_strides(shape) if last else host_dnnl.dense(shape))
    return strided(first), tuple(strided(p) for p in post)


class OnednnFused(HostVendor):
    """``fused_elementwise`` of large float32 tensors as one oneDNN primitive with post-ops (see the module), in
    the plan's channels-last layout where it holds the tensors so."""

    private_layout = OnednnOp.private_layout

    def __init__(self, dev: Any, name: str, library: str, in_last: frozenset[int] = frozenset(),
                 out_last: bool = False) -> None:
        super().__init__(dev, name, library)
        self._library, self._in_last, self._out_last = library, frozenset(in_last), out_last

    # -- the plan's channels-last layout -------------------------------------------------------------
    def offers_layout(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Chains of 3-5 dimensions oneDNN runs without a last cast whose inputs either have the output's shape or
        vary along N and C only (a per-channel scale: its memory is one in both layouts)."""
        y = outs[0]
        rank = len(y.shape)
        form = self._form(ins, outs, attrs) if 3 <= rank <= 5 else None
        if form is None or form[3] is not None or self._layer(form, ins, y) is None:
            return False
        return all(padded(t.shape, rank) == tuple(y.shape) or all(d == 1 for d in padded(t.shape, rank)[2:])
                   for t in ins)

    def layout_input(self, index: int) -> bool:
        """Every input."""
        return True

    def with_layout(self, in_last: frozenset[int], out_last: bool) -> "OnednnFused":
        """This chain reading inputs ``in_last`` and writing its output channels-last."""
        return OnednnFused(self.dev, self.name, self._library, frozenset(in_last), bool(out_last))

    # -- routes --------------------------------------------------------------------------------------
    @staticmethod
    def _form(ins: Any, outs: Any, attrs: dict) -> tuple | None:
        """``chain_form`` of a chain too large to run on the calling thread alone, else None."""
        return None if is_small(outs[0].size) else chain_form(ins, outs, attrs)

    def _layer(self, form: tuple, ins: Any, y: Any, in_last: frozenset[int] = frozenset(),
               out_last: bool = False) -> ChainLayer | None:
        """The layer running a chain of this ``form`` with inputs ``in_last`` and the output (``out_last``)
        channels-last (built once per geometry, steps and layout); None where oneDNN builds only its reference
        form or none."""
        first, post, reads, _ = form
        shape = tuple(y.shape)
        first, post = _with_strides(first, post, reads, ins, y, in_last)
        a_strides = host_dnnl.last_strides(shape) if reads[0] in in_last else host_dnnl.dense(shape)
        y_strides = host_dnnl.last_strides(shape) if out_last else host_dnnl.dense(shape)
        key = (self.name, (shape, first, post, a_strides, y_strides), ())
        layer = cached_layer(self.dev, key, lambda: ChainLayer(shape, first, post, a_strides, y_strides), y.size)
        if layer is None or layer.implementation.startswith("ref"):  # (oneDNN's reference form: slower than NumPy)
            return None
        return layer

    def route(self, ins: Any, outs: Any, attrs: dict) -> tuple[ChainLayer, tuple[int, ...], dict | None] | None:
        """The layer running this chain in the graph's layout, the input each of its sources reads and a last
        cast's attributes (``chain_form``); None where NumPy runs it."""
        form = self._form(ins, outs, attrs)
        layer = None if form is None else self._layer(form, ins, outs[0])
        return None if layer is None else (layer, form[2], form[3])

    def accepts(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Large float32 chains oneDNN expresses as one primitive and builds it for."""
        return self.route(ins, outs, attrs) is not None

    def bind(self, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any) -> Callable[[], None]:
        """The chain on these buffers as a call on the OpenMP team, a last cast after it from a float32 temporary
        of the call's own (the op's NumPy reference, computed apart, where the output overlaps an input other than
        exactly as the first source, or oneDNN builds no primitive).  Where the plan holds the tensors of the
        output's shape in both layouts, the chain runs in its first source's: the others reordered into
        temporaries first, the output from one after (oneDNN's primitive over mixed layouts is its slow
        reference form)."""
        pool = self.dev.pool
        u = outs[0]
        rank = len(u.shape)
        views = [pool._bytes(b)[:t.size * 4] for b, t in zip(in_bufs, ins)]
        y = pool._bytes(out_bufs[0])[:u.size * u.dtype.itemsize]
        full = {i for i, t in enumerate(ins) if padded(t.shape, rank) == tuple(u.shape)}
        form = self._form(ins, outs, attrs)
        if form is not None:
            reads, cast = form[2], form[3]
            last = cast is None and reads[0] in self._in_last  # the layout the chain runs in (a cast reads row-major)
            moved = {j for j in full if (j in self._in_last) != last}
            layer = self._layer(form, ins, u, frozenset(full) if last else frozenset(), last)
            call = None if layer is None else self._bound((layer, reads, cast), views, y, u, moved,
                                                          self._out_last != last, last)
            if call is not None:
                return call
        arrays = [logical(v, t, i in self._in_last and i in full) for i, (v, t) in enumerate(zip(views, ins))]
        return reference_call(self.name, arrays, logical(y, u, self._out_last), attrs)

    def _bound(self, found: tuple, views: list[np.ndarray], y: np.ndarray, u: Any, moved: set[int], y_moved: bool,
               last: bool) -> Callable[[], None] | None:
        """The chain's layer bound to these operands: inputs ``moved`` reordered into temporaries of the chain's
        layout first (``last``: channels-last), the result reordered into Y after where ``y_moved``, or cast
        into it where the chain ends in a cast; None where Y overlaps an input other than exactly as the first
        source."""
        layer, reads, cast = found
        shape = tuple(u.shape)
        operands = list(views)
        before = []
        for j in sorted(moved):
            operands[j] = np.empty(u.size * 4, np.uint8)
            before.append(self._reorder(shape, not last, views[j], operands[j]))
        direct = cast is None and not y_moved
        target = y if direct else np.empty(u.size * 4, np.uint8)
        first, rest = operands[reads[0]], [_ONE if j == ONE else operands[j] for j in reads[1:]]
        if direct and (any(np.may_share_memory(v, y) for v in rest)
                       or (first.ctypes.data != y.ctypes.data and np.may_share_memory(first, y))):
            return None
        steps = [*before, layer.bind(first.ctypes.data, [v.ctypes.data for v in rest], target.ctypes.data,
                                     keep=(views, operands, target))]
        if cast is not None:
            from devicelayer.kernels.op import get

            steps.append(get("cast").bind_into([target.view(np.float32).reshape(shape)],
                                               [y.view(u.dtype).reshape(shape)], cast))
        elif y_moved:
            steps.append(self._reorder(shape, last, target, y))
        if len(steps) == 1:
            return team_call(steps[0], True)

        def in_order() -> None:
            for step in steps:
                step()
        return team_call(in_order, True)

    def _reorder(self, shape: tuple[int, ...], from_last: bool, x: np.ndarray, y: np.ndarray) -> Callable[[], None]:
        """A float32 tensor of ``shape`` moved from one layout into the other (``from_last``: it is channels-last)."""
        last, plain = host_dnnl.last_strides(shape), host_dnnl.dense(shape)
        xs, ys = (last, plain) if from_last else (plain, last)
        layer = strided_reorder(self.dev, shape, tuple(range(len(shape))), xs, ys)
        if layer is None:
            raise host_dnnl.DnnlError(f"{self.label}: oneDNN builds no reorder for {shape}")
        return layer.bind(x.ctypes.data, y.ctypes.data, keep=(x, y))

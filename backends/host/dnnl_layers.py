"""oneDNN pooling, batch and layer normalization, channel shuffle, concatenation, eltwise, elementwise chain,
softmax, matmul and attention layers for the host backend (ctypes).

Each layer is one primitive built for fixed layouts: it reads its inputs in the
layout they are in (NCHW or channels-last, as the plan negotiated) and writes
its output in the layout it reads, reordered where the reader wants the other.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any, Sequence

from .dnnl import (ARG_DST, ARG_MEAN, ARG_MULTIPLE_SRC, ARG_SCALE, ARG_SHIFT, ARG_SRC, ARG_SRC_1, ARG_VARIANCE,
                        ARG_WEIGHTS, FORWARD_INFERENCE, VECTOR, Layer, Step, check, dense, dims, tag)

POOL_MAX, POOL_AVG_INCLUDE_PAD, POOL_AVG_EXCLUDE_PAD = 0x1FF, 0x2FF, 0x3FF
_POST_OP_ARG = 32768  # DNNL_ARG_ATTR_MULTIPLE_POST_OP_BASE: post-op k's tensor is argument (k + 1) * this | SRC_1
SOFTMAX_ACCURATE, SOFTMAX_LOG = 0x30000, 0x30001
_USE_GLOBAL_STATS, _USE_SCALE, _USE_SHIFT, _FUSE_RELU = 0x1, 0x2, 0x4, 0x8


class _OutputLayer(Layer):
    """A primitive writing its output in the layout it reads; a reorder follows where Y is wanted in the other."""

    def _output(self, y: Sequence[int], computed_last: bool, want_last: bool) -> Any:
        md = self._md(y, tag(len(y), computed_last))
        self.m_computed = self._memory(md)
        self.y_reorder = None
        if want_last != computed_last:
            md_y = self._md(y, tag(len(y), want_last))
            if not self._same(md, md_y):
                self.m_y = self._memory(md_y)
                self.y_reorder = self._reorder(md, md_y, self.m_computed, self.m_y)
                self.y_bytes = self._size(md)
        return md

    def _finish(self, forward: tuple[Any, tuple[int, Any]], at: dict, y: int, what: str) -> list[Step]:
        """The steps of ``forward`` (its inputs' addresses in ``at``) into Y at ``y``, through the reorder where
        there is one."""
        direct = self.y_reorder is None
        out = y if direct else self._scratch("_y_scratch", self.y_bytes)
        steps: list[Step] = [(forward, {**at, self.m_computed: out}, what)]
        if not direct:
            steps.append((self.y_reorder, {self.m_computed: out, self.m_y: y}, "output reorder"))
        return steps


class PoolLayer(_OutputLayer):
    """A max or average pool (``alg``) of one geometry; pads as oneDNN takes them (the end pads reach the last
    window)."""

    def __init__(self, x: Sequence[int], y: Sequence[int], alg: int, kernel: Sequence[int], strides: Sequence[int],
                 dilations: Sequence[int], pads_begin: Sequence[int], pads_end: Sequence[int], x_last: bool,
                 y_last: bool) -> None:
        super().__init__()
        md_x = self._md(x, tag(len(x), x_last))
        self.m_x = self._memory(md_x)
        md_y = self._output(y, x_last, y_last)
        pd = ctypes.c_void_p()
        check(self.lib, self.lib.dnnl_pooling_forward_primitive_desc_create(
            ctypes.byref(pd), self.eng.engine, FORWARD_INFERENCE, alg, md_x, md_y, dims(strides), dims(kernel),
            dims([d - 1 for d in dilations]), dims(pads_begin), dims(pads_end), self._attr()),
            "dnnl_pooling_forward_primitive_desc_create")
        self._described(pd)
        self.forward = (self._primitive(pd),
                        self._args([(ARG_SRC, self.m_x), (ARG_DST, self.m_computed)] + self._scratchpad(pd)))

    def _steps(self, x: int, y: int) -> list[Step]:
        """Y = pool(X) at these addresses."""
        return self._finish(self.forward, {self.m_x: x}, y, "pooling")


class NormLayer(_OutputLayer):
    """Batch normalization with given statistics (inference), ReLU fused where asked."""

    def __init__(self, x: Sequence[int], epsilon: float, relu: bool, x_last: bool, y_last: bool) -> None:
        super().__init__()
        md_x = self._md(x, tag(len(x), x_last))
        self.m_x = self._memory(md_x)
        md_y = self._output(x, x_last, y_last)
        flags = _USE_GLOBAL_STATS | _USE_SCALE | _USE_SHIFT | (_FUSE_RELU if relu else 0)
        pd = ctypes.c_void_p()
        check(self.lib, self.lib.dnnl_batch_normalization_forward_primitive_desc_create(
            ctypes.byref(pd), self.eng.engine, FORWARD_INFERENCE, md_x, md_y, epsilon, flags, self._attr()),
            "dnnl_batch_normalization_forward_primitive_desc_create")
        self._described(pd)
        md_c = self._md((x[1],), VECTOR)
        self.m_params = [self._memory(md_c) for _ in range(4)]  # scale, shift, mean, variance
        params = zip((ARG_SCALE, ARG_SHIFT, ARG_MEAN, ARG_VARIANCE), self.m_params)
        self.forward = (self._primitive(pd), self._args([(ARG_SRC, self.m_x), (ARG_DST, self.m_computed), *params]
                                                        + self._scratchpad(pd)))

    def _steps(self, x: int, scale: int, bias: int, mean: int, var: int, y: int) -> list[Step]:
        """Y = (X - mean) / sqrt(var + epsilon) * scale + bias (then ReLU) at these addresses."""
        at = dict(zip(self.m_params, (scale, bias, mean, var)))
        return self._finish(self.forward, {self.m_x: x, **at}, y, "batch normalization")


class _ReorderLayer(Layer):
    """One reorder from X's strides to Y's over one shape (float32)."""

    what = "reorder"

    def _build(self, shape: Sequence[int], src: Sequence[int], dst: Sequence[int]) -> None:
        md_x, md_y = self._strided_md(shape, src), self._strided_md(shape, dst)
        self.m_x, self.m_y = self._memory(md_x), self._memory(md_y)
        self.forward = self._reorder(md_x, md_y, self.m_x, self.m_y)

    def _steps(self, x: int, y: int) -> list[Step]:
        """Y = X moved at these addresses."""
        return [(self.forward, {self.m_x: x, self.m_y: y}, self.what)]


class ShuffleLayer(_ReorderLayer):
    """A channel shuffle as one reorder: output channel j·group + i is input channel i·(C/group) + j, each side
    NCHW or channels-last (every tensor seen as (N, C/group, group, spatial) with its own strides)."""

    what = "shuffle"

    def __init__(self, x: Sequence[int], group: int, x_last: bool, y_last: bool) -> None:
        super().__init__()
        n, c, s = x[0], x[1], math.prod(x[2:])
        k = c // group
        src = (c * s, 1, k, c) if x_last else (c * s, s, k * s, 1)
        dst = (c * s, group, 1, c) if y_last else (c * s, group * s, s, 1)
        self._build((n, k, group, s), src, dst)


class TransposeLayer(_ReorderLayer):
    """A transpose as one reorder: output axis k is input axis perm[k]; each side plain row-major, or held with
    the strides given (in elements, along its own axes)."""

    what = "transpose"

    def __init__(self, x: Sequence[int], perm: Sequence[int], x_strides: Sequence[int] | None = None,
                 y_strides: Sequence[int] | None = None) -> None:
        super().__init__()
        y = [x[p] for p in perm]
        xs = dense(x) if x_strides is None else x_strides
        self._build(y, [xs[p] for p in perm], dense(y) if y_strides is None else y_strides)


class ConcatLayer(Layer):
    """Tensors joined along ``axis``, each read in its own layout, Y written in its own."""

    def __init__(self, xs: Sequence[Sequence[int]], y: Sequence[int], axis: int, xs_last: Sequence[bool],
                 y_last: bool) -> None:
        super().__init__()
        mds = [self._md(x, tag(len(x), last)) for x, last in zip(xs, xs_last)]
        md_y = self._md(y, tag(len(y), y_last))
        self.m_xs = [self._memory(md) for md in mds]
        self.m_y = self._memory(md_y)
        pd = ctypes.c_void_p()
        check(self.lib, self.lib.dnnl_concat_primitive_desc_create(
            ctypes.byref(pd), self.eng.engine, md_y, len(mds), axis, (ctypes.c_void_p * len(mds))(*mds),
            self._attr()), "dnnl_concat_primitive_desc_create")
        self._described(pd)
        srcs = [(ARG_MULTIPLE_SRC + i, m) for i, m in enumerate(self.m_xs)]
        self.forward = (self._primitive(pd), self._args(srcs + [(ARG_DST, self.m_y)] + self._scratchpad(pd)))

    def _steps(self, xs: Sequence[int], y: int) -> list[Step]:
        """Y = concat(X...) at these addresses."""
        return [(self.forward, {**dict(zip(self.m_xs, xs)), self.m_y: y}, "concatenation")]


class EltwiseLayer(Layer):
    """oneDNN's elementwise function ``alg`` (with its ``alpha`` and ``beta``) over ``n`` float32 elements."""

    def __init__(self, n: int, alg: int, alpha: float, beta: float) -> None:
        super().__init__()
        md = self._md((n,), VECTOR)
        self.m_x, self.m_y = self._memory(md), self._memory(md)
        pd = ctypes.c_void_p()
        check(self.lib, self.lib.dnnl_eltwise_forward_primitive_desc_create(
            ctypes.byref(pd), self.eng.engine, FORWARD_INFERENCE, alg, md, md, alpha, beta, self._attr()),
            "dnnl_eltwise_forward_primitive_desc_create")
        self._described(pd)
        self.forward = (self._primitive(pd),
                        self._args([(ARG_SRC, self.m_x), (ARG_DST, self.m_y)] + self._scratchpad(pd)))

    def _steps(self, x: int, y: int) -> list[Step]:
        """Y = f(X) at these addresses."""
        return [(self.forward, {self.m_x: x, self.m_y: y}, "eltwise")]


class BinaryLayer(Layer):
    """oneDNN's binary primitive ``alg``: Y = A op B over float32 tensors of one rank, Y of A's shape, B
    broadcast along its axes of one element; plain row-major, or A and Y channels-last (``last``)."""

    def __init__(self, a: Sequence[int], b: Sequence[int], alg: int, last: bool = False) -> None:
        super().__init__()
        md_a = self._md(a, tag(len(a), True) if last else len(a) + 1)  # ab, abc...: plain row-major
        md_b = self._md(b, len(b) + 1)
        self.m_a, self.m_b, self.m_y = self._memory(md_a), self._memory(md_b), self._memory(md_a)
        pd = ctypes.c_void_p()
        check(self.lib, self.lib.dnnl_binary_primitive_desc_create(
            ctypes.byref(pd), self.eng.engine, alg, md_a, md_b, md_a, self._attr()),
            "dnnl_binary_primitive_desc_create")
        self._described(pd)
        self.forward = (self._primitive(pd), self._args([(ARG_SRC, self.m_a), (ARG_SRC_1, self.m_b),
                                                         (ARG_DST, self.m_y)] + self._scratchpad(pd)))

    def _steps(self, a: int, b: int, y: int) -> list[Step]:
        """Y = A op B at these addresses."""
        return [(self.forward, {self.m_a: a, self.m_b: b, self.m_y: y}, "binary")]


class SoftmaxLayer(Layer):
    """Softmax (``log``: log-softmax) along axis 1 of a plain (R, K) or (R, K, inner) float32 tensor."""

    def __init__(self, shape: Sequence[int], log: bool) -> None:
        super().__init__()
        md = self._md(shape, len(shape) + 1)  # ab / abc: plain row-major
        self.m_x, self.m_y = self._memory(md), self._memory(md)
        pd = ctypes.c_void_p()
        check(self.lib, self.lib.dnnl_softmax_forward_primitive_desc_create(
            ctypes.byref(pd), self.eng.engine, FORWARD_INFERENCE, SOFTMAX_LOG if log else SOFTMAX_ACCURATE, md, md,
            1, self._attr()), "dnnl_softmax_forward_primitive_desc_create")
        self._described(pd)
        self.forward = (self._primitive(pd),
                        self._args([(ARG_SRC, self.m_x), (ARG_DST, self.m_y)] + self._scratchpad(pd)))

    def _steps(self, x: int, y: int) -> list[Step]:
        """Y = softmax(X) at these addresses."""
        return [(self.forward, {self.m_x: x, self.m_y: y}, "softmax")]


class LayerNormLayer(Layer):
    """Layer normalization of each row of a plain (R, K) float32 tensor over its K elements, with a scale and a
    shift of K elements where given (statistics computed, not stored)."""

    def __init__(self, shape: Sequence[int], epsilon: float, scale: bool, shift: bool) -> None:
        super().__init__()
        md = self._md(shape, len(shape) + 1)  # ab: plain row-major
        self.m_x, self.m_y = self._memory(md), self._memory(md)
        flags = (_USE_SCALE if scale else 0) | (_USE_SHIFT if shift else 0)
        pd = ctypes.c_void_p()
        check(self.lib, self.lib.dnnl_layer_normalization_forward_primitive_desc_create(
            ctypes.byref(pd), self.eng.engine, FORWARD_INFERENCE, md, md, None, epsilon, flags, self._attr()),
            "dnnl_layer_normalization_forward_primitive_desc_create")
        self._described(pd)
        md_k = self._md((shape[-1],), VECTOR)
        self.m_params = [self._memory(md_k) for _ in range(int(scale) + int(shift))]
        kinds = [k for k, given in ((ARG_SCALE, scale), (ARG_SHIFT, shift)) if given]
        self.forward = (self._primitive(pd), self._args([(ARG_SRC, self.m_x), (ARG_DST, self.m_y),
                                                         *zip(kinds, self.m_params)] + self._scratchpad(pd)))

    def _steps(self, x: int, params: Sequence[int], y: int) -> list[Step]:
        """Y = (X - mean) / sqrt(var + epsilon) [* scale] [+ shift] at these addresses."""
        return [(self.forward, {self.m_x: x, self.m_y: y, **dict(zip(self.m_params, params))},
                 "layer normalization")]


def post_op_attr(layer: Layer, post: Sequence[tuple]) -> tuple[Any, list[tuple[int, Any]]]:
    """A primitive attribute holding ``post`` as oneDNN post-ops, in order: ("eltwise", algorithm, alpha, beta), or
    ("binary", algorithm, shape[, strides]) with a tensor of that shape (row-major unless its strides are given); and (argument, memory) of each binary post-op's
    tensor."""
    lib = layer.lib
    attr = layer._attr()
    ops = layer._made("dnnl_post_ops_create", "dnnl_post_ops_destroy")
    posts: list[tuple[int, Any]] = []
    for k, (kind, alg, *rest) in enumerate(post):
        if kind == "eltwise":
            check(lib, lib.dnnl_post_ops_append_eltwise(ops, alg, *rest), "dnnl_post_ops_append_eltwise")
            continue
        md = layer._strided_md(rest[0], rest[1] if len(rest) > 1 else dense(rest[0]))
        check(lib, lib.dnnl_post_ops_append_binary(ops, alg, md), "dnnl_post_ops_append_binary")
        posts.append(((k + 1) * _POST_OP_ARG | ARG_SRC_1, layer._memory(md)))
    check(lib, lib.dnnl_primitive_attr_set_post_ops(attr, ops), "dnnl_primitive_attr_set_post_ops")
    return attr, posts


class ChainLayer(Layer):
    """A chain of elementwise steps over float32 tensors as one oneDNN primitive: its first step, ("binary",
    algorithm, B's shape, B's strides) of A, of Y's shape, and B broadcast along its axes of one element, or
    ("eltwise", algorithm, alpha, beta) of A; then ``post`` in order (``post_op_attr``).  A and Y held with the
    strides given (in elements)."""

    def __init__(self, y: Sequence[int], first: tuple, post: Sequence[tuple], a_strides: Sequence[int],
                 y_strides: Sequence[int]) -> None:
        super().__init__()
        md_a, md_y = self._strided_md(y, a_strides), self._strided_md(y, y_strides)
        attr, posts = post_op_attr(self, post)
        kind, alg, *rest = first
        pd = ctypes.c_void_p()
        self.m_a, self.m_y = self._memory(md_a), self._memory(md_y)
        sources = [(ARG_SRC, self.m_a)]
        if kind == "binary":
            md_b = self._strided_md(rest[0], rest[1])
            check(self.lib, self.lib.dnnl_binary_primitive_desc_create(
                ctypes.byref(pd), self.eng.engine, alg, md_a, md_b, md_y, attr), "dnnl_binary_primitive_desc_create")
            sources.append((ARG_SRC_1, self._memory(md_b)))
        else:
            check(self.lib, self.lib.dnnl_eltwise_forward_primitive_desc_create(
                ctypes.byref(pd), self.eng.engine, FORWARD_INFERENCE, alg, md_a, md_y, rest[0], rest[1], attr),
                "dnnl_eltwise_forward_primitive_desc_create")
        self._described(pd)
        self.m_tensors = [m for _, m in sources[1:]] + [m for _, m in posts]
        self.forward = (self._primitive(pd), self._args([*sources, (ARG_DST, self.m_y), *posts]
                                                        + self._scratchpad(pd)))

    def _steps(self, a: int, tensors: Sequence[int], y: int) -> list[Step]:
        """Y = post(first(A[, B])) at these addresses, ``tensors`` B's (for a binary first step), then those of
        the binary post-ops in order."""
        return [(self.forward, {self.m_a: a, self.m_y: y, **dict(zip(self.m_tensors, tensors))}, "chain")]


class MatmulLayer(Layer):
    """oneDNN's matmul of plain row-major float32 tensors of one rank: Y (..., M, N) = A (..., M, K) @ B (..., K, N),
    B's batch dimensions broadcast where they are one, then ``post`` in order (``post_op_attr``; a binary post-op's
    shape has ones where it broadcasts to Y)."""

    def __init__(self, a: Sequence[int], b: Sequence[int], y: Sequence[int], post: Sequence[tuple]) -> None:
        super().__init__()
        md_a, md_b, md_y = (self._strided_md(s, dense(s)) for s in (a, b, y))
        attr, posts = post_op_attr(self, post)
        pd = ctypes.c_void_p()
        check(self.lib, self.lib.dnnl_matmul_primitive_desc_create(ctypes.byref(pd), self.eng.engine, md_a, md_b,
                                                                   None, md_y, attr),
              "dnnl_matmul_primitive_desc_create")
        self._described(pd)
        self.m_a, self.m_b, self.m_y = self._memory(md_a), self._memory(md_b), self._memory(md_y)
        self.m_posts = [m for _, m in posts]
        self.forward = (self._primitive(pd), self._args([(ARG_SRC, self.m_a), (ARG_WEIGHTS, self.m_b),
                                                         (ARG_DST, self.m_y), *posts] + self._scratchpad(pd)))

    def _steps(self, a: int, b: int, y: int, tensors: Sequence[int]) -> list[Step]:
        """Y = post(A @ B) at these addresses, ``tensors`` those of the binary post-ops in order."""
        return [(self.forward, {self.m_a: a, self.m_b: b, self.m_y: y, **dict(zip(self.m_posts, tensors))},
                 "matmul")]


class AttentionLayer(Layer):
    """softmax(post(Q Kᵀ)) V over float32 (B, H, M, ·) tensors: oneDNN's matmul with ``post`` as its post-ops
    (``post_op_attr``: the scale, the mask) into S, softmax over S in place, and matmul S V into Y; Q, K (as
    (B, H, Dk, Skv)), V and Y are read and written through ``strides`` (four tuples)."""

    def __init__(self, q: Sequence[int], strides: Sequence[Sequence[int]], skv: int, dv: int,
                 post: Sequence[tuple]) -> None:
        super().__init__()
        lib = self.lib
        B, H, M, Dk = q
        s_shape, v_shape, y_shape = (B, H, M, skv), (B, H, skv, dv), (B, H, M, dv)
        q_strides, k_strides, v_strides, y_strides = strides
        md_s = self._strided_md(s_shape, dense(s_shape))
        md_q, md_v, md_y = (self._strided_md(t, st) for t, st in ((q, q_strides), (v_shape, v_strides),
                                                                     (y_shape, y_strides)))
        md_k = self._strided_md((B, H, Dk, skv), k_strides)
        attr, posts = post_op_attr(self, post)
        self.m_q, self.m_k, self.m_s = self._memory(md_q), self._memory(md_k), self._memory(md_s)
        self.m_posts = [m for _, m in posts]
        self.m_v, self.m_y = self._memory(md_v), self._memory(md_y)
        pd = ctypes.c_void_p()
        check(lib, lib.dnnl_matmul_primitive_desc_create(ctypes.byref(pd), self.eng.engine, md_q, md_k, None, md_s,
                                                         attr), "dnnl_matmul_primitive_desc_create")
        self._described(pd)
        self.scores = (self._primitive(pd), self._args([(ARG_SRC, self.m_q), (ARG_WEIGHTS, self.m_k),
                                                        (ARG_DST, self.m_s), *posts] + self._scratchpad(pd)))
        rows = self._md((B * H * M, skv), 3)  # ab: plain row-major
        pd = ctypes.c_void_p()
        check(lib, lib.dnnl_softmax_forward_primitive_desc_create(
            ctypes.byref(pd), self.eng.engine, FORWARD_INFERENCE, SOFTMAX_ACCURATE, rows, rows, 1, self._attr()),
            "dnnl_softmax_forward_primitive_desc_create")
        self._described(pd, main=False)
        self.m_rows = self._memory(rows)
        self.softmax = (self._primitive(pd), self._args([(ARG_SRC, self.m_rows), (ARG_DST, self.m_rows)]
                                                        + self._scratchpad(pd)))
        pd = ctypes.c_void_p()
        check(lib, lib.dnnl_matmul_primitive_desc_create(ctypes.byref(pd), self.eng.engine, md_s, md_v, None, md_y,
                                                         self._attr()), "dnnl_matmul_primitive_desc_create")
        self._described(pd, main=False)
        self.values = (self._primitive(pd), self._args([(ARG_SRC, self.m_s), (ARG_WEIGHTS, self.m_v),
                                                        (ARG_DST, self.m_y)] + self._scratchpad(pd)))

    def _steps(self, q: int, k: int, v: int, tensors: Sequence[int], s: int, y: int) -> list[Step]:
        """S = post(Q Kᵀ), S = softmax(S), Y = S V at these addresses, ``tensors`` those of the binary post-ops."""
        return [(self.scores, {self.m_q: q, self.m_k: k, self.m_s: s, **dict(zip(self.m_posts, tensors))},
                 "attention scores"),
                (self.softmax, {self.m_rows: s}, "attention softmax"),
                (self.values, {self.m_s: s, self.m_v: v, self.m_y: y}, "attention values")]

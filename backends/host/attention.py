"""Float32 attention on the host through oneDNN: the scores as one matmul with the scale and the mask as its
post-ops, softmax, and the weighted values as a second matmul (``AttentionLayer``).

The op's NumPy reference takes a dozen passes over the score matrix (3x the unfused nodes' time for BERT's
heads); three bound oneDNN calls take fewer than the nodes the attention pattern replaces.  oneDNN's softmax
gives a row that is -inf everywhere (every key masked) or holds a NaN or +inf other values than the op does
(zeros, NaN) but NaN in that row, so each call sums its output afterwards and, where that is not finite,
computes the call again by the op's reference (the row maxima of the scores took 45 us at BERT's size on the VM,
NumPy's reduction along short rows; a sum of the output, a few us).  Causal, windowed, soft-capped,
boolean-masked and padded calls (a mask shorter than the keys, ``nonpad_kv_seqlen``), a second output and other
dtypes run the op's reference.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from devicelayer.kernels.op import get

from . import dnnl as host_dnnl, omp as host_omp
from .backend import HostVendor
from .conv import small_flops
from .binary import ALGORITHMS as BINARY
from .dnnl_layers import AttentionLayer
from .eltwise import LINEAR, cached_layer, reference_call
from .stretch import team_call


def packed_offsets(ins: Any, attrs: dict) -> tuple[int, int, int]:
    """Bytes from the start of q's, k's and v's buffers to their first element: their heads' places in one row
    where they are packed (``packed_heads``), else 0."""
    op = get("attention")
    head = op.heads_major(ins, attrs)[0].shape[3] * ins[0].dtype.itemsize
    return tuple(first * head for first in op.first_heads(attrs))


def _geometry(ins: Any, attrs: dict) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...], int, int,
                                              tuple[int, ...] | None] | None:
    """(Q's (B, Hk, G*Sq, Dk) view; the strides of Q, of K as (B, Hk, Dk, Skv), of V and of Y; Skv, Dv, the
    mask's 4-D shape) where the layer computes the call; None where the reference runs it."""
    if any(t.dtype not in host_dnnl.DTYPES for t in ins[:3]) or len(ins) > 4 or attrs["is_causal"]:
        return None
    major = attrs.get("sequence_major", (0, 0, 0, 0))
    q, k, v = get("attention").heads_major(ins, attrs)[:3]
    if attrs["softcap"] > 0 or attrs["qk_matmul_output_mode"] >= 0 or attrs["left_window_size"] >= 0 or \
            attrs["right_window_size"] >= 0 or any(t.size == 0 for t in ins[:3]):
        return None
    B, Hq, Sq, Dk = q.shape
    _, Hk, Skv, Dv = v.shape
    G = Hq // Hk
    mask = None
    if len(ins) == 4:
        m = ins[3]
        if m.dtype not in host_dnnl.DTYPES or m.shape[-1] != Skv:
            return None
        mask = (1,) * (4 - len(m.shape)) + tuple(m.shape)
        if G > 1 and mask[1:3] != (1, 1):  # (the G query heads of a key head are rows of one product)
            return None
    packed = get("attention").packed(attrs) is not None
    if G > 1 and (major[0] or major[3] or packed):  # (the G query heads of a key head are no one strided block)
        return None
    if packed:  # (q, k and v read where they lie in one (B, S, (Hq + 2·Hk)·D) tensor: ``packed_offsets``)
        row = (Hq + 2 * Hk) * Dk
        y_strides = (Sq * Hq * Dv, Dv, Hq * Dv, 1) if major[3] else (Hq * Sq * Dv, G * Sq * Dv, Dv, 1)
        return (B, Hk, G * Sq, Dk), ((Sq * row, Dk, row, 1), (Sq * row, Dk, 1, row), (Sq * row, Dk, row, 1),
                                     y_strides), Skv, Dv, mask
    kd = (Hk * Dk * Skv, Dk * Skv)
    k_strides = (*kd, Skv, 1) if attrs["k_transposed"] else (Skv * Hk * Dk, Dk, 1, Hk * Dk) if major[1] else \
        (*kd, 1, Dk)
    q_strides, y_strides = ((Sq * Hq * D, D, Hq * D, 1) if f else (Hq * Sq * D, G * Sq * D, D, 1)
                            for f, D in ((major[0], Dk), (major[3], Dv)))
    v_strides = (Skv * Hk * Dv, Dv, Hk * Dv, 1) if major[2] else (Hk * Skv * Dv, Skv * Dv, Dv, 1)
    return (B, Hk, G * Sq, Dk), (q_strides, k_strides, v_strides, y_strides), Skv, Dv, mask


def _small(q: tuple[int, ...], skv: int, dv: int) -> bool:
    """Whether a call of this geometry runs on the calling thread alone (``conv.small_flops``)."""
    return 2 * math.prod(q[:3]) * skv * (q[3] + dv) < small_flops()


class OnednnAttention(HostVendor):
    """``attention`` in float32 through oneDNN (``AttentionLayer``) where it has no causal or window bias, no
    softcap, no second output and a float mask as long as the keys (or none)."""

    def route(self, ins: Any, attrs: dict) -> tuple[AttentionLayer, tuple] | None:
        """The layer computing these inputs (built once per geometry) and the geometry (``_geometry``), None where
        the reference runs them."""
        found = _geometry(ins, attrs)
        if found is None:
            return None
        q, strides, skv, dv, mask = found
        post = (("eltwise", LINEAR, float(attrs["scale"]), 0.0),) + \
            ((("binary", BINARY["add"][0], mask),) if mask is not None else ())
        key = ("attention", (q, strides, skv, dv, post), ())
        layer = cached_layer(self.dev, key, lambda: AttentionLayer(q, strides, skv, dv, post),
                             0 if _small(q, skv, dv) else 1 << 62)
        return None if layer is None else (layer, found)

    def accepts(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Float32 calls ``route`` gives a layer for."""
        return self.route(ins, attrs) is not None

    def bind(self, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any) -> Callable[[], None]:
        """The op on these buffers as a call on the host worker (the reference where the output overlaps an
        input)."""
        pool = self.dev.pool
        arrays = [pool._bytes(b)[:t.size * t.dtype.itemsize].view(t.dtype).reshape(t.shape)
                  for b, t in zip((*in_bufs, *out_bufs), (*ins, *outs))]
        y = arrays[len(ins)]
        routed = self.route(ins, attrs)
        if routed is None or any(np.may_share_memory(y, x) for x in arrays[:len(ins)]):
            return reference_call(self.name, arrays[:len(ins)], y, attrs)
        layer, (q, _, skv, dv, _) = routed
        s = np.empty((*q[:3], skv), np.float32)  # the scores, then (softmax in place) the probabilities
        at = packed_offsets(ins, attrs)
        run = layer.bind(arrays[0].ctypes.data + at[0], arrays[1].ctypes.data + at[1], arrays[2].ctypes.data + at[2],
                         [a.ctypes.data for a in arrays[3:len(ins)]], s.ctypes.data, y.ctypes.data,
                         keep=(arrays, s))
        op, inputs = get(self.name), arrays[:len(ins)]

        def call() -> None:
            run()
            # (a NaN or +inf score makes its probability NaN in oneDNN's softmax, a row -inf everywhere the whole
            # row: Y's sum shows either; the op's reference gives such a call's values)
            if not math.isfinite(float(y.sum())):
                with np.errstate(all="ignore"):
                    y[...] = op.reference(inputs, attrs)[0]
        if _small(q, skv, dv):
            return team_call(host_omp.alone(host_dnnl.library(), call), False)
        return team_call(call, True, lambda: host_omp.alone(host_dnnl.library(), call))

"""oneDNN's LSTM, GRU and linear-before-reset GRU primitives (forward inference, one layer) for the host backend
(ctypes), and the relayout of ONNX's weights into the form they read.

ONNX stacks the gates of W (D, G*H, I) and R (D, G*H, H) as LSTM i, o, f, c and GRU z, r, h; oneDNN reads
weights as ldigo (1, D, I, G, H) with gates LSTM i, f, c, o and GRU u(=z), r, o(=h), in a packed layout of its
own choice (reordered into once per weights), biases as ldgo (1, D, G, H) with both ONNX biases summed (the
linear-before-reset GRU keeps h's recurrent bias apart as a fourth gate), and LSTM peepholes as ldgo
(1, D, 3, H) in the order i, f, o (ONNX: i, o, f).  Activations are oneDNN's own: sigmoid and tanh.
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from . import runner as host_runner
from .dnnl import (ARG_BIAS, ARG_DST, ARG_SRC, ARG_WEIGHTS, FORWARD_INFERENCE, DnnlError, Layer, Step, aligned, check,
                   dense)

_ANY = 1  # dnnl_format_tag_any
_QUERY_EXEC_ARG_MD = 255
_LEFT2RIGHT, _RIGHT2LEFT, _CONCAT = 1, 2, 3  # dnnl_rnn_direction_t
ARG_SRC_ITER, ARG_SRC_ITER_C = ARG_SRC + 1, ARG_SRC + 2
ARG_DST_ITER, ARG_DST_ITER_C = ARG_DST + 1, ARG_DST + 2
ARG_WEIGHTS_ITER, ARG_WEIGHTS_PEEPHOLE = ARG_WEIGHTS + 1, ARG_WEIGHTS + 2

#: cell -> (gates, ONNX gate of each oneDNN gate, bias gates)
CELLS = {"lstm": (4, (0, 2, 3, 1), 4), "gru": (3, (0, 1, 2), 3), "lbr_gru": (3, (0, 1, 2), 4)}
_CREATE = {"lstm": "dnnl_lstm_forward_primitive_desc_create", "gru": "dnnl_gru_forward_primitive_desc_create",
           "lbr_gru": "dnnl_lbr_gru_forward_primitive_desc_create"}


class Geometry(NamedTuple):
    """What one layer is built for: cell, sizes, direction and which optional operands it reads."""

    cell: str  # "lstm", "gru" or "lbr_gru"
    steps: int  # T
    batch: int  # N
    inputs: int  # I
    hidden: int  # H
    dirs: int  # D: 1 or 2 (bidirectional, concatenated)
    reverse: bool  # one direction, right to left
    batch_first: bool  # ONNX layout 1: X (N, T, I), Y (N, T, D, H), states (N, D, H)
    initial_h: bool
    initial_c: bool
    peephole: bool


class Weights(NamedTuple):
    """A layer's constants in the layout its primitive reads (``RnnLayer.prepare``)."""

    layer: np.ndarray
    iter: np.ndarray
    bias: np.ndarray
    peephole: np.ndarray | None


def _gates(a: np.ndarray, order: Sequence[int], h: int) -> np.ndarray:
    """``a`` (D, G*H, ...) with its gate blocks in oneDNN's ``order``, as (D, G, H, ...)."""
    return a.reshape(a.shape[0], -1, h, *a.shape[2:])[:, list(order)]


def onednn_weights(g: Geometry, w: np.ndarray, r: np.ndarray, b: np.ndarray | None,
                   p: np.ndarray | None) -> tuple[np.ndarray, ...]:
    """ONNX's W, R, B and P as oneDNN's plain weights_layer and weights_iter (ldigo), bias and peephole (ldgo)."""
    gates, order, bias_gates = CELLS[g.cell]
    h, d = g.hidden, g.dirs
    wl = np.ascontiguousarray(_gates(w, order, h).transpose(0, 3, 1, 2), np.float32)[None]
    wi = np.ascontiguousarray(_gates(r, order, h).transpose(0, 3, 1, 2), np.float32)[None]
    bias = np.zeros((1, d, bias_gates, h), np.float32)
    if b is not None:
        wb, rb = _gates(b[:, :gates * h], order, h), _gates(b[:, gates * h:], order, h)
        if g.cell == "lbr_gru":  # o = tanh(W_o x + Wb_o + r * (U_o h + Rb_o)): Rb_o is a gate of its own
            bias[0, :, :2] = wb[:, :2] + rb[:, :2]
            bias[0, :, 2], bias[0, :, 3] = wb[:, 2], rb[:, 2]
        else:
            bias[0] = wb + rb
    peep = None if p is None else np.ascontiguousarray(p.reshape(d, 3, h)[:, [0, 2, 1]], np.float32)[None]
    return wl, wi, bias, peep


class RnnLayer(Layer):
    """One oneDNN recurrent layer of a ``Geometry``: X, the initial states, Y and the final states read and
    written where ONNX keeps them (Y through a scratch array and a reorder where ONNX's (T, D, N, H) is not
    oneDNN's (T, N, D*H): two directions and a batch above one).  ``lane`` 0 or 1: only that direction of a
    bidirectional geometry (left to right, right to left), reading and writing its part of the same tensors."""

    def __init__(self, g: Geometry, lane: int | None = None) -> None:
        super().__init__()
        self.g, self.lane = g, lane
        t, n, i, h, d_all = g.steps, g.batch, g.inputs, g.hidden, g.dirs
        d = d_all if lane is None else 1
        gates, _, bias_gates = CELLS[g.cell]
        lstm = g.cell == "lstm"
        x_strides = (i, t * i, 1) if g.batch_first else (n * i, i, 1)
        # states (1, D, N, H): ONNX's (D, N, H), or (N, D, H) batch first
        s_strides = (d_all * n * h, h, d_all * h, 1) if g.batch_first else dense((1, d_all, n, h))
        self.y_direct = g.batch_first or d == 1 or n == 1
        if g.batch_first:
            y_strides = (d_all * h, t * d_all * h, 1)
        else:  # ONNX's (T, D, N, H): a lane's (T, N, H) within it
            y_strides = dense((t, n, d * h)) if lane is None else (d_all * n * h, h, 1)
        #: bytes from the start of Y and of the states to this lane's part
        self.y_at = self.s_at = 0 if lane is None else lane * 4 * (h if g.batch_first else n * h)
        md_x = self._strided_md((t, n, i), x_strides)
        md_s = self._strided_md((1, d, n, h), s_strides)
        md_y = self._strided_md((t, n, d * h), y_strides)
        self.plain = [self._strided_md(s, dense(s)) for s in ((1, d, i, gates, h), (1, d, h, gates, h))]
        md_any = [self._md(s, _ANY) for s in ((1, d, i, gates, h), (1, d, h, gates, h))]
        md_b = self._strided_md((1, d, bias_gates, h), dense((1, d, bias_gates, h)))
        md_p = self._strided_md((1, d, 3, h), dense((1, d, 3, h))) if g.peephole else None
        direction = (_CONCAT if d == 2 else _RIGHT2LEFT if g.reverse else _LEFT2RIGHT) if lane is None else \
            (_LEFT2RIGHT, _RIGHT2LEFT)[lane]
        h0 = md_s if g.initial_h else None
        pd = ctypes.c_void_p()
        create = _CREATE[g.cell]
        if lstm:  # (oneDNN takes both initial states or neither: a zero initial_c where only initial_h is given)
            c0 = md_s if g.initial_h else None
            status = getattr(self.lib, create)(ctypes.byref(pd), self.eng.engine, FORWARD_INFERENCE, direction,
                                               md_x, h0, c0, *md_any, md_p, None, md_b, md_y, md_s, md_s, 0,
                                               self._attr())
        else:
            status = getattr(self.lib, create)(ctypes.byref(pd), self.eng.engine, FORWARD_INFERENCE, direction,
                                               md_x, h0, *md_any, md_b, md_y, md_s, 0, self._attr())
        check(self.lib, status, create)
        self._described(pd)
        self.prim = self._primitive(pd)
        chosen = [self.lib.dnnl_primitive_desc_query_md(pd, _QUERY_EXEC_ARG_MD, arg)
                  for arg in (ARG_WEIGHTS, ARG_WEIGHTS_ITER)]
        self.weight_bytes = [self._size(md) for md in chosen]
        self.m_plain = [self._memory(md) for md in self.plain]
        self.m_chosen = [self._memory(md) for md in chosen]
        self.reorders = [None if self._same(a, b) else self._reorder(a, b, m_a, m_b)
                         for a, b, m_a, m_b in zip(self.plain, chosen, self.m_plain, self.m_chosen)]
        self.m_x, self.m_y = self._memory(md_x), self._memory(md_y)
        self.m_b = self._memory(md_b)
        self.m_p = self._memory(md_p) if g.peephole else None
        self.m_h0 = self._memory(md_s) if g.initial_h else None
        self.m_c0 = self._memory(md_s) if lstm and g.initial_h else None
        if self.m_c0 is not None and not g.initial_c:
            self.m_c0.point(self._zeros(d_all * n * h))
        self.m_hn = self._memory(md_s)
        self.m_cn = self._memory(md_s) if lstm else None
        args = [(ARG_SRC, self.m_x), (ARG_WEIGHTS, self.m_chosen[0]), (ARG_WEIGHTS_ITER, self.m_chosen[1]),
                (ARG_BIAS, self.m_b), (ARG_DST, self.m_y), (ARG_DST_ITER, self.m_hn)]
        optional = [(ARG_SRC_ITER, self.m_h0), (ARG_SRC_ITER_C, self.m_c0), (ARG_WEIGHTS_PEEPHOLE, self.m_p),
                    (ARG_DST_ITER_C, self.m_cn)]
        self.args = self._args(args + [(k, m) for k, m in optional if m is not None] + self._scratchpad(pd))
        self.y_bytes = t * n * d * h * 4
        self.y_reorder = None
        if not self.y_direct:  # oneDNN's (T, N, D, H) into ONNX's (T, D, N, H), one reorder
            shape = (t, n, d, h)
            md_from, md_to = self._strided_md(shape, dense(shape)), self._strided_md(shape, (d * n * h, h, n * h, 1))
            self.m_y_from, self.m_y_to = self._memory(md_from), self._memory(md_to)
            self.y_reorder = self._reorder(md_from, md_to, self.m_y_from, self.m_y_to)

    def _zeros(self, count: int) -> int:
        """The address of ``count`` float32 zeros the layer keeps."""
        self._zero_c = np.zeros(count, np.float32)
        return self._zero_c.ctypes.data

    def prepare(self, w: np.ndarray, r: np.ndarray, b: np.ndarray | None, p: np.ndarray | None) -> Weights:
        """ONNX's W, R, B (None: zeros) and P (LSTM peepholes, or None) in the layout the primitive reads, as new
        arrays."""
        g = self.g
        if self.lane is not None:  # (this direction's weights, as a one-direction layer's)
            at = slice(self.lane, self.lane + 1)
            w, r, b, p = (None if a is None else a[at] for a in (w, r, b, p))
            g = g._replace(dirs=1, reverse=self.lane == 1)
        wl, wi, bias, peep = onednn_weights(g, w, r, b, p)
        out = []
        with self.lock:
            for plain, reorder, m_plain, m_chosen, nbytes in zip((wl, wi), self.reorders, self.m_plain,
                                                                 self.m_chosen, self.weight_bytes):
                if reorder is None:
                    out.append(plain)
                    continue
                chosen = aligned(nbytes)
                m_plain.point(plain.ctypes.data)
                m_chosen.point(chosen.ctypes.data)
                self._execute(*reorder, "weights reorder")
                self._wait()
                out.append(chosen)
        return Weights(out[0], out[1], bias, peep)

    def _steps(self, x: int, h0: int, c0: int, weights: Weights, y: int, hn: int, cn: int) -> list[Step]:
        """Y, Y_h (and Y_c) at these addresses from X, the initial states (0 where not built for) and ``weights``
        (Y: (T, D, N, H), or (N, T, D, H) batch first); ``run`` and ``bind`` take these operands."""
        y, hn, cn, h0, c0 = (ptr + (self.y_at if k == 0 else self.s_at) if ptr else 0
                             for k, ptr in enumerate((y, hn, cn, h0, c0)))
        at = {self.m_x: x, self.m_hn: hn, self.m_b: weights.bias.ctypes.data,
              self.m_chosen[0]: weights.layer.ctypes.data, self.m_chosen[1]: weights.iter.ctypes.data}
        for m, ptr in ((self.m_h0, h0), (self.m_c0, c0), (self.m_cn, cn)):
            if m is not None and ptr:
                at[m] = ptr
        if self.m_p is not None:
            at[self.m_p] = weights.peephole.ctypes.data
        out = y if self.y_reorder is None else self._scratch("_y_scratch", self.y_bytes)
        steps: list[Step] = [((self.prim, self.args), {**at, self.m_y: out}, self.g.cell)]
        if self.y_reorder is not None:
            steps.append((self.y_reorder, {self.m_y_from: out, self.m_y_to: y}, "output reorder"))
        return steps


class RnnLanes:
    """A bidirectional ``Geometry`` as its two directions (``RnnLayer(g, lane)``), run at once on two threads of
    the calling thread's OpenMP team by the host runner (``LANES``), each direction alone on its thread.  A small
    layer's directions otherwise run one after the other on one thread (oneDNN's bidirectional primitive, or its
    team meeting at every step, which costs more than it saves there)."""

    def __init__(self, g: Geometry) -> None:
        self.g = g
        self.lanes = (RnnLayer(g, 0), RnnLayer(g, 1))
        self.implementation = self.lanes[0].implementation

    def prepare(self, w: np.ndarray, r: np.ndarray, b: np.ndarray | None,
                p: np.ndarray | None) -> tuple[Weights, Weights]:
        """Each direction's weights (``RnnLayer.prepare``)."""
        return tuple(lane.prepare(w, r, b, p) for lane in self.lanes)  # type: ignore[return-value]

    def run(self, x: int, h0: int, c0: int, weights: tuple[Weights, Weights], y: int, hn: int, cn: int) -> None:
        """Both directions on the calling thread, one after the other (``RnnLayer.run``'s operands)."""
        for lane, own in zip(self.lanes, weights):
            lane.run(x, h0, c0, own, y, hn, cn)

    def bind(self, x: int, h0: int, c0: int, weights: tuple[Weights, Weights], y: int, hn: int, cn: int,
             keep: Any = None) -> Callable[[], None]:
        """Both directions on fixed operands as one call: at once in the host runner (``LANES``), one after the
        other from Python."""
        calls = [lane.bind(x, h0, c0, own, y, hn, cn, keep=keep) for lane, own in zip(self.lanes, weights)]
        found = [host_runner.native(call) for call in calls]
        if any(f is None or len(f.entries) != 1 for f in found):
            raise DnnlError("a direction of a bidirectional layer is not one primitive call")

        def apart() -> None:
            for call in calls:
                call()
        entries = [f.entries[0] for f in found]
        head = [(0, 0, 0, len(entries), host_runner.LANES)]
        return host_runner.mark(apart, head + entries, [lock for f in found for lock in f.locks], keep=calls)

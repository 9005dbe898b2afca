"""attention: scaled dot-product attention over (batch, heads, sequence, head size) tensors, ONNX Attention's
core (the converter reshapes 3-D inputs into heads and concatenates the key/value cache).

Three plans (``form`` chooses; ``forcing`` overrides it on a thread, for tests and benchmarks):

- ``fused``, for decoding (few query rows) where the head sizes fit its shared memory: a work-group per query row
  streams over the keys in chunks of its size, each item scoring one key, with the running maximum and the output
  accumulated as in online softmax (no score matrix in memory).
- ``tiled``, for longer query blocks over up to ``TILED_KEYS_MAX`` keys on GPUs (flash attention): a work-group
  per tile of query rows of one head, each row's query and output held in registers by its items (its lanes,
  1-8, among which its keys are dealt, merged at the tile's end); the group loads a block of keys and values into
  shared memory, each item scores its row against its keys of the block and folds them into its online softmax.
  One kernel, keys and values read once per tile, no score matrix; a causal tile stops at its last visible key.
- ``blocked``, the tiled kernel's plan with register blocks (flash attention as a GEMM kernel does it): a
  work-group of TY x TX items per tile of TY·TM query rows, the tile's queries in shared memory; for each block
  of keys and values in shared memory an item scores TM rows against BK/TX keys (TM + BK/TX shared reads for
  TM·BK/TX multiply-adds), the rows' maxima meet in shared memory, and the item adds the block's weighted values
  into its TM x Dv/TX outputs from the probabilities in shared memory.  The default for longer query blocks on
  GPUs, where its shared memory fits.
- ``composed``: the score matrix by the GEMM kernels, a row kernel for softcap, bias and softmax, and the GEMM
  kernels again for the weighted values.

Each of q, k, v and the output may be given sequence-major, (B, S, H, D) (``sequence_major``): the layout a
projection writes and the next one reads, so that an exported model's transposes around attention go.  q, k and v
may also be read where one fused projection wrote them, the heads of one (B, S, (Hq + 2·Hk)·D) row
(``packed_heads``), so that the split cutting them apart goes too (the composition copies them apart first).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from ...info import DeviceInfo
from ..dialect import KernelSpec, Param, dialect_type
from ..op import Launch, Plan, TensorType, float_attr, groups_for, local_1d, register
from .matmul import gemm_steps
from .movement import copy_launch
from .reduce import acc_type, add, bool_attr, fmax, group_local, group_reduce, int_attr, known_attrs
from .rows import FloatKernelOp, float_tensor, grouped_rows, widen

#: largest head size (of queries/keys and of values) the fused kernel holds in shared memory
FUSED_HEAD_MAX = 256
#: work items of the fused kernel's groups (keys scored at once)
FUSED_GROUP = 64
#: query rows up to which the fused kernel runs (decoding); longer query blocks run the GEMM composition, faster
#: there (the fused kernel reads the keys and values once per query row), unless its score matrix would exceed
#: ``COMPOSED_SCORES_MAX`` bytes
FUSED_QUERIES = 16
COMPOSED_SCORES_MAX = 1 << 28
#: largest head size (of queries/keys and of values) of the tiled kernel: each item holds its query row and its
#: output row in registers
TILED_HEAD_MAX = 128
#: keys of a tiled kernel's block (halved while its shared memory does not fit the device)
TILED_KEYS = 32
#: keys up to which the tiled kernel runs by default: each item loops over its row's keys (dealt among its lanes)
#: with a multiply-add and a shared-memory read each, where the GEMM kernels' register blocks reuse what they read.
#: On the H200, an exported attention block with inputs on the device, against its nodes: 128 keys 0.89-1.00x as
#: the tiled kernel on CUDA, NVIDIA's OpenCL and Vulkan; 256 keys 0.99-1.43x (the composition 0.91-0.96x on OpenCL
#: and Vulkan); 512 and 1500 keys 0.97-1.88x (the composition 0.75-0.92x)
TILED_KEYS_MAX = 128
#: the tiled kernel's groups per compute unit below which a group takes fewer query rows, more items per row
TILED_SPREAD = 2
#: items a tiled kernel's query row may have
TILED_LANES = (1, 2, 4, 8)
#: largest head size (of queries/keys and of values) of the blocked kernel
BLOCKED_HEAD_MAX = 128
#: items of a blocked kernel's group (TY = TX = its square root), where the device allows, else 64
BLOCKED_GROUP = 256
#: query rows an item of the blocked kernel may take (TM): the most that still gives every compute unit a group
BLOCKED_ROWS = (4, 2, 1)
#: keys per item of a blocked kernel's block (BK / TX), halved while its shared memory does not fit the device
BLOCKED_KEYS = 4
#: the plans, as ``form`` names them
FORMS = ("fused", "tiled", "blocked", "composed")
#: qk_matmul_output_mode values: the scaled QK product, after softcap, after the bias, the probabilities
QK_MODES = (0, 1, 2, 3)


_state = threading.local()


@contextlib.contextmanager
def forcing(form: str, lanes: int | None = None, rows: int | None = None) -> Iterator[None]:
    """Every attention planned on this thread inside the block takes ``form`` where its inputs allow it (the
    fused, tiled and blocked kernels have head size limits, the tiled and blocked ones no
    ``qk_matmul_output_mode`` 3); the tiled kernel with ``lanes`` items per query row (1, 2, 4 or 8), the blocked
    one with ``rows`` query rows per item (one of ``BLOCKED_ROWS``), where given."""
    if form not in FORMS:
        raise ValueError(f"attention form {form!r} is not one of {FORMS}")
    if lanes is not None and lanes not in TILED_LANES:
        raise ValueError(f"tiled attention lanes {lanes!r} is not one of {TILED_LANES}")
    if rows is not None and rows not in BLOCKED_ROWS:
        raise ValueError(f"blocked attention rows {rows!r} is not one of {BLOCKED_ROWS}")
    before = getattr(_state, "forced", None), getattr(_state, "lanes", None), getattr(_state, "rows", None)
    _state.forced, _state.lanes, _state.rows = form, lanes, rows
    try:
        yield
    finally:
        _state.forced, _state.lanes, _state.rows = before


def _heads_major(t: TensorType, sequence_major: bool) -> TensorType:
    """``t``'s (B, H, S, D) shape, given (B, S, H, D) where ``sequence_major``."""
    return TensorType((t.shape[0], t.shape[2], t.shape[1], t.shape[3]), t.dtype) if sequence_major else t


def _unpacked(inputs: Sequence[TensorType], packed: Sequence[int]) -> list[TensorType]:
    """q, k and v as (B, H, S, D) from the (B, S, (Hq + 2·Hk)·D) tensors of ``packed_heads`` (Hq, Hk)."""
    Hq, Hk = packed
    B, S, W = inputs[0].shape
    D = W // (Hq + 2 * Hk)
    return [TensorType((B, h, S, D), t.dtype) for h, t in zip((Hq, Hk, Hk), inputs[:3])]



def _accumulator_bytes(dtype: np.dtype) -> int:
    """Bytes of one element of the kernels' shared arrays: float64 for float64 inputs, float32 otherwise."""
    return 8 if dtype == np.float64 else 4


def _fitting_keys(keys: int, floor: int, dtype: np.dtype, info: DeviceInfo,
                  shared: Callable[[int], Sequence[int]]) -> int | None:
    """The most keys a block holds, halving from ``keys`` to no fewer than ``floor``, whose shared arrays
    (``shared(keys)``: their elements) fit the device's local memory; None where none fit."""
    while keys >= floor and _accumulator_bytes(dtype) * sum(shared(keys)) > info.local_memory:
        keys //= 2
    return keys if keys >= floor else None

@register
class Attention(FloatKernelOp):
    """attention(q, k, v[, mask][, nonpad_kv_seqlen], scale=1/sqrt(Dk), is_causal=False, softcap=0, offset=0,
    left_window_size=-1, right_window_size=-1, qk_matmul_output_mode=-1): softmax(q·kᵀ·scale + bias)·v.

    q is (B, Hq, Sq, Dk), k (B, Hk, Skv, Dk), v (B, Hk, Skv, Dv); Hk divides Hq and query head h reads key head
    h // (Hq / Hk).  softcap > 0 maps scores s to softcap·tanh(s / softcap) before the bias.  The bias adds:
    the mask (bool: false is -inf; float: added), broadcast to (B, Hq, Sq, L) with L <= Skv and the keys past L
    masked; with ``is_causal`` -inf where key j > i + offset; the window: -inf where i + offset - j exceeds
    ``left_window_size`` or j - i - offset exceeds ``right_window_size`` (each when >= 0); with
    ``nonpad_kv_seqlen`` (B,) integers: -inf for keys j >= nonpad[b], and offset = nonpad[b] - Sq.  A query
    row whose bias is -inf everywhere gives zeros.  With ``qk_matmul_output_mode`` 0-3 a second output
    (B, Hq, Sq, Skv) holds the scaled product, the softcapped one, that plus the bias, or the probabilities.
    Three more attributes, not ONNX's, which the attention pattern sets: with ``k_transposed`` k is given as kᵀ,
    (B, Hk, Dk, Skv); with ``nan_rows`` a row whose bias is -inf everywhere gives NaN, as a softmax does;
    ``sequence_major`` (four flags: q, k, v, the output) gives those flagged as (B, S, H, D) (k not with
    ``k_transposed``); ``packed_heads`` (Hq, Hk) gives q, k and v each as a (B, S, (Hq + 2·Hk)·D) tensor whose rows
    hold q's heads, then k's, then v's (one fused projection's output, normally the same tensor three times).
    """

    name = "attention"
    min_inputs = 3
    max_inputs = 5
    math = "dl_exp( dl_tanh("

    def check(self, inputs, attrs):
        known_attrs(self, attrs, ("scale", "is_causal", "softcap", "offset", "left_window_size",
                                  "right_window_size", "qk_matmul_output_mode", "k_transposed", "nan_rows",
                                  "sequence_major", "packed_heads"))
        q, k, v = inputs[:3]
        k_transposed = bool_attr(self, attrs, "k_transposed", False)
        flags = attrs.get("sequence_major", (0, 0, 0, 0))
        if not isinstance(flags, (list, tuple)) or len(flags) != 4 or any(
                isinstance(f, bool) or not isinstance(f, (int, np.integer)) or f not in (0, 1) for f in flags):
            raise self.error(f"sequence_major must be four flags 0 or 1 (q, k, v, output), got {flags!r}")
        major = tuple(int(f) for f in flags)
        if k_transposed and major[1]:
            raise self.error("k is given either transposed or sequence-major, not both")
        packed = self._packed_heads(attrs)
        if packed != (0, 0):
            if k_transposed or any(major[:3]):
                raise self.error("packed q, k and v are sequence-major as given: no k_transposed, and their "
                                 "sequence_major flags 0")
            for t, what in zip((q, k, v), ("q", "k", "v")):
                float_tensor(self, t, what)
                if len(t.shape) != 3 or t.shape != q.shape or t.dtype != q.dtype:
                    raise self.error(f"packed q, k and v must be 3-D (batch, sequence, heads x head size) of one "
                                     f"shape and dtype, got {q.shape} {q.dtype} and {t.shape} {t.dtype} ({what})")
            if q.shape[2] % (packed[0] + 2 * packed[1]):
                raise self.error(f"a packed row of {q.shape[2]} does not hold {packed[0]} query and 2 x {packed[1]} "
                                 "key/value heads of one size")
        for t, what in zip((q, k, v), ("q", "k", "v")):
            float_tensor(self, t, what)
            if len(t.shape) != 4 and packed == (0, 0):
                layout = "sequence, heads" if major["qkv".index(what)] else "heads, sequence"
                raise self.error(f"{what} must be 4-D (batch, {layout}, head size), got {t.shape}")
            if t.dtype != q.dtype:
                raise self.error(f"q, k and v must share one dtype, got {q.dtype} and {t.dtype}")
        q, k, v = (_unpacked(inputs, packed) if packed != (0, 0) else
                   [_heads_major(t, bool(f)) for t, f in zip((q, k, v), major)])
        B, Hq, Sq, Dk = q.shape
        if k_transposed:
            k = TensorType(k.shape[:2] + (k.shape[3], k.shape[2]), k.dtype)
        if k.shape[0] != B or v.shape[0] != B:
            raise self.error(f"q, k and v must have one batch size, got {q.shape}, {k.shape}, {v.shape}")
        Hk, Skv = k.shape[1], k.shape[2]
        if k.shape[3] != Dk:
            raise self.error(f"k's head size {k.shape[3]} differs from q's {Dk}")
        if v.shape[1] != Hk or v.shape[2] != Skv:
            raise self.error(f"v {v.shape} must have k's heads and sequence length ({Hk}, {Skv})")
        if Hk < 1 or Hq % Hk:
            raise self.error(f"the {Hk} key/value heads must divide the {Hq} query heads")
        mask, nonpad = self._extras(inputs)
        if mask is not None:
            if mask.dtype != q.dtype and mask.dtype != np.bool_:
                raise self.error(f"the mask must be bool or q's dtype {q.dtype}, got {mask.dtype}")
            if not 1 <= len(mask.shape) <= 4:
                raise self.error(f"the mask must have rank 1 to 4, got {mask.shape}")
            full = (1,) * (4 - len(mask.shape)) + tuple(mask.shape)
            if any(m not in (1, n) for m, n in zip(full[:3], (B, Hq, Sq))) or full[3] > Skv:
                raise self.error(f"the mask {mask.shape} does not broadcast to ({B}, {Hq}, {Sq}, <= {Skv})")
        if nonpad is not None and nonpad.shape != (B,):
            raise self.error(f"nonpad_kv_seqlen must have shape ({B},), got {nonpad.shape}")
        scale = float_attr(self, attrs, "scale", 1.0 / np.sqrt(Dk) if Dk else 1.0)
        softcap = float_attr(self, attrs, "softcap", 0.0)
        if softcap < 0:
            raise self.error(f"softcap must be >= 0, got {softcap}")
        left = int_attr(self, attrs, "left_window_size", -1)
        right = int_attr(self, attrs, "right_window_size", -1)
        if left < -1 or right < -1:
            raise self.error(f"window sizes must be -1 (unbounded) or >= 0, got {left} and {right}")
        offset = int_attr(self, attrs, "offset", 0)
        if offset < 0:
            raise self.error(f"offset must be >= 0, got {offset}")
        mode = int_attr(self, attrs, "qk_matmul_output_mode", -1)
        if mode not in (-1, *QK_MODES):
            raise self.error(f"qk_matmul_output_mode must be -1 (no output) or one of {QK_MODES}, got {mode}")
        return {"scale": scale, "is_causal": bool_attr(self, attrs, "is_causal", False), "softcap": softcap,
                "offset": offset, "left_window_size": left, "right_window_size": right,
                "qk_matmul_output_mode": mode, "k_transposed": k_transposed,
                "nan_rows": bool_attr(self, attrs, "nan_rows", False), "sequence_major": major,
                "packed_heads": packed}

    def _packed_heads(self, attrs: dict[str, Any]) -> tuple[int, int]:
        """``packed_heads`` checked: (Hq, Hk) with Hk dividing Hq, or (0, 0) (not packed)."""
        packed = attrs.get("packed_heads", (0, 0))
        if packed is None:
            return (0, 0)
        if not isinstance(packed, (list, tuple)) or len(packed) != 2 or any(
                isinstance(n, bool) or not isinstance(n, (int, np.integer)) for n in packed):
            raise self.error(f"packed_heads must be two head counts (query, key/value), got {packed!r}")
        hq, hk = (int(n) for n in packed)
        if (hq, hk) != (0, 0) and (hq < 1 or hk < 1 or hq % hk):
            raise self.error(f"packed_heads needs key/value heads dividing the query heads, got {packed!r}")
        return (hq, hk)

    @staticmethod
    def packed(attrs: dict[str, Any]) -> tuple[int, int] | None:
        """(Hq, Hk) where q, k and v are packed (``packed_heads``), else None."""
        heads = tuple(attrs.get("packed_heads") or (0, 0))
        return None if heads == (0, 0) else (int(heads[0]), int(heads[1]))

    @staticmethod
    def first_heads(attrs: dict[str, Any]) -> tuple[int, int, int]:
        """Where q's, k's and v's heads start in a packed row, counted in heads (0, Hq, Hq + Hk); zeros unpacked."""
        heads = Attention.packed(attrs)
        return (0, 0, 0) if heads is None else (0, heads[0], heads[0] + heads[1])

    @staticmethod
    def mask_strides(mask: TensorType) -> tuple[int, int, int]:
        """Element strides (batch, head, query) of a mask broadcast to (B, H, Sq, its last dimension)."""
        full = (1,) * (4 - len(mask.shape)) + tuple(mask.shape)
        strides, step = [], full[3]
        for d in (2, 1, 0):
            strides.append(0 if full[d] == 1 else step)
            step *= full[d]
        sq, sh, sb = strides
        return sb, sh, sq

    @staticmethod
    def heads_major(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        """The inputs with q, k and v as (B, H, S, D) (k as given where transposed): the shapes the plans read."""
        packed = Attention.packed(attrs)
        if packed is not None:
            return [*_unpacked(inputs, packed), *inputs[3:]]
        major = attrs.get("sequence_major", (0, 0, 0, 0))
        return [*(_heads_major(t, bool(f)) for t, f in zip(inputs[:3], major)), *inputs[3:]]

    def reads_packed(self, inputs: Sequence[TensorType], attrs: dict[str, Any], info: DeviceInfo) -> bool:
        """Whether the op's kernels read packed q, k and v where they lie (the composition's products copy them
        apart first)."""
        heads = self.heads_major(inputs, attrs)
        return self.form(heads, info, attrs["qk_matmul_output_mode"]) != "composed"

    def _extras(self, inputs: Sequence[Any]) -> tuple[Any, Any]:
        """(mask, nonpad_kv_seqlen) among inputs 3 and 4 (None where absent): integers are the lengths."""
        mask = nonpad = None
        for t in inputs[3:]:
            kind = t.dtype.kind
            if kind in "iu":
                if nonpad is not None:
                    raise self.error("takes one nonpad_kv_seqlen input")
                nonpad = t
            elif mask is None and nonpad is None:
                mask = t
            else:
                raise self.error("takes the mask before nonpad_kv_seqlen, each at most once")
        return mask, nonpad

    def infer(self, inputs, attrs):
        q, k, v = self.heads_major(inputs, attrs)[:3]
        B, Hq, Sq, _ = q.shape
        outs = [_heads_major(TensorType((B, Hq, Sq, v.shape[3]), q.dtype), bool(attrs["sequence_major"][3]))]
        if attrs["qk_matmul_output_mode"] >= 0:
            outs.append(TensorType((B, Hq, Sq, v.shape[2]), q.dtype))
        return outs

    # -- reference ------------------------------------------------------------------------------------------------
    def _bias(self, inputs, attrs, dtype: np.dtype) -> np.ndarray:
        """The additive bias, broadcastable to (B, Hq, Sq, Skv)."""
        q = inputs[0]
        B, _, Sq, _ = q.shape
        Skv = inputs[2].shape[2]
        mask, nonpad = self._extras(inputs)
        ninf = dtype.type(-np.inf)
        bias = np.zeros((1, 1, Sq, Skv), dtype)
        if mask is not None:
            m = mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
            pad = Skv - m.shape[3]
            if m.dtype == np.bool_:
                m = np.where(m, dtype.type(0), ninf)
            m = np.concatenate([m.astype(dtype), np.full(m.shape[:3] + (pad,), ninf, dtype)], axis=3)
            bias = bias + m
        i = np.arange(Sq).reshape(1, 1, Sq, 1)
        j = np.arange(Skv).reshape(1, 1, 1, Skv)
        off = (nonpad.astype(np.int64).reshape(B, 1, 1, 1) - Sq) if nonpad is not None else attrs["offset"]
        blocked = np.zeros((1, 1, 1, 1), bool)
        if attrs["is_causal"]:
            blocked = blocked | (j > i + off)
        if attrs["left_window_size"] >= 0:
            blocked = blocked | (i + off - j > attrs["left_window_size"])
        if attrs["right_window_size"] >= 0:
            blocked = blocked | (j - i - off > attrs["right_window_size"])
        if nonpad is not None:
            blocked = blocked | (j >= nonpad.astype(np.int64).reshape(B, 1, 1, 1))
        return np.where(blocked, ninf, bias)

    def reference(self, inputs, attrs):
        major = attrs.get("sequence_major", (0, 0, 0, 0))
        packed = self.packed(attrs)
        if packed is not None:
            hq, hk = packed
            B, S, W = inputs[0].shape
            cut = [np.reshape(a, (B, S, hq + 2 * hk, W // (hq + 2 * hk))) for a in inputs[:3]]
            parts = [cut[0][:, :, :hq], cut[1][:, :, hq:hq + hk], cut[2][:, :, hq + hk:]]
            inputs = [np.swapaxes(a, 1, 2) for a in parts] + list(inputs[3:])
        else:
            inputs = [np.swapaxes(a, 1, 2) if f else a for a, f in zip(inputs[:3], major)] + list(inputs[3:])
        q, k, v = (widen(a) for a in inputs[:3])
        if attrs.get("k_transposed"):
            k = np.swapaxes(k, 2, 3)
        dtype = q.dtype
        B, Hq, Sq, Dk = q.shape
        Hk, Skv, Dv = k.shape[1], k.shape[2], v.shape[3]
        G = Hq // Hk
        with np.errstate(all="ignore"):
            # query head h = hk·G + g reads key head hk: the G heads of a key head as more query rows
            s = np.matmul(q.reshape(B, Hk, G * Sq, Dk), np.swapaxes(k, 2, 3)).reshape(B, Hq, Sq, Skv)
            s = s * dtype.type(attrs["scale"])
            raw = s
            if attrs["softcap"] > 0:
                cap = dtype.type(attrs["softcap"])
                s = cap * np.tanh(s / cap)
            bias = self._bias(inputs, attrs, dtype)
            t = s + bias
            guard = np.all(bias == -np.inf, axis=3, keepdims=True)
            top = np.max(t, axis=3, keepdims=True) if Skv else np.zeros(t.shape[:3] + (1,), dtype)
            e = np.exp(t - np.where(top == -np.inf, dtype.type(0), top))
            total = np.sum(e, axis=3, keepdims=True)
            empty = dtype.type(np.nan if attrs.get("nan_rows") else 0)
            p = np.where(guard, empty, e / np.where(total == 0, dtype.type(1), total))
            y = np.matmul(p.reshape(B, Hk, G * Sq, Skv), v).reshape(B, Hq, Sq, Dv)
        outs = [np.ascontiguousarray(np.swapaxes(y, 1, 2) if major[3] else y).astype(inputs[0].dtype)]
        mode = attrs["qk_matmul_output_mode"]
        if mode >= 0:
            outs.append((raw, s, np.broadcast_to(t, raw.shape), p)[mode].astype(inputs[0].dtype))
        return outs

    # -- kernels --------------------------------------------------------------------------------------------------
    def _fits(self, inputs: Sequence[TensorType], info: DeviceInfo) -> bool:
        """Whether the fused kernel takes these head sizes on the device (shared memory, group size)."""
        q, v = inputs[0], inputs[2]
        need = _accumulator_bytes(q.dtype) * (2 * FUSED_HEAD_MAX + 2 * FUSED_GROUP)
        return (max(q.shape[3], v.shape[3]) <= FUSED_HEAD_MAX and info.local_memory >= need
                and group_local(info, FUSED_GROUP) >= 8)

    def _tiling(self, inputs: Sequence[TensorType], info: DeviceInfo) -> tuple[int, int, int] | None:
        """(rows, lanes, keys) of the tiled kernel for these inputs on the device, or None where its head sizes or
        shared memory do not fit: a group of rows x lanes items takes ``rows`` query rows, each row's keys dealt
        among its ``lanes`` items, and a block of ``keys`` keys at a time.  Rows halve (lanes double, to 8) while the
        tiles would not give each compute unit ``TILED_SPREAD`` groups; keys halve while shared memory is short."""
        q, v = inputs[0], inputs[2]
        Dk, Dv = q.shape[3], v.shape[3]
        if max(Dk, Dv) > TILED_HEAD_MAX or min(Dk, Dv) < 1:
            return None
        group = group_local(info, 64)
        if group < 8:
            return None
        rows, lanes = group, 1
        heads = q.shape[0] * q.shape[1]
        forced = getattr(_state, "lanes", None)
        if forced is not None:
            rows, lanes = group // forced, forced
        want = TILED_SPREAD * info.compute_units
        while forced is None and lanes < TILED_LANES[-1] and heads * -(-q.shape[2] // rows) < want:
            rows, lanes = rows // 2, lanes * 2
        keys = _fitting_keys(TILED_KEYS, 8, q.dtype, info, lambda k: self._tiled_shared(Dk, Dv, rows, lanes, k))
        return (rows, lanes, keys) if keys is not None else None

    @staticmethod
    def _tiled_shared(Dk: int, Dv: int, rows: int, lanes: int, keys: int) -> tuple[int, int, int, int]:
        """Elements of the tiled kernel's shared arrays: the key block (rows padded by one element against bank
        conflicts), the value block (which also carries the lanes' outputs when they merge), the scores, the
        merge's partials."""
        return (keys * (Dk + 1), max(keys * (Dv + 1), rows * Dv if lanes > 1 else 0), keys * rows,
                rows * lanes)

    def _blocking(self, inputs: Sequence[TensorType], info: DeviceInfo) -> tuple[int, int, int] | None:
        """(side, rows, keys) of the blocked kernel for these inputs on the device, or None where its head sizes or
        shared memory do not fit: a group of side x side items (TY = TX = side), each item ``rows`` query rows
        (TM) and ``keys`` keys of a block (KC; BK = side·keys).  Rows are the most of ``BLOCKED_ROWS`` that still
        give each compute unit a group and leave no item only rows past the end; keys halve while shared memory
        is short."""
        q, v = inputs[0], inputs[2]
        B, Hq, Sq, Dk = q.shape
        Dv = v.shape[3]
        if max(Dk, Dv) > BLOCKED_HEAD_MAX or min(Dk, Dv) < 1:
            return None
        local = group_local(info, BLOCKED_GROUP)
        side = 16 if local >= 256 else 8 if local >= 64 else 0
        if not side:
            return None
        forced = getattr(_state, "rows", None)
        rows = forced or next((r for r in BLOCKED_ROWS if r == 1 or (
            B * Hq * -(-Sq // (side * r)) >= info.compute_units and side * (r - 1) < Sq)), 1)
        keys = _fitting_keys(BLOCKED_KEYS, 1, q.dtype, info, lambda k: self._blocked_shared(Dk, Dv, side, rows, k))
        return (side, rows, keys) if keys is not None else None

    @staticmethod
    def _blocked_shared(Dk: int, Dv: int, side: int, rows: int, keys: int) -> tuple[int, int, int, int, int]:
        """Elements of the blocked kernel's shared arrays: the tile's queries and the key block (rows padded by one
        element against bank conflicts), the value block (its rows padded to a multiple of ``side``), the block's
        probabilities, the rows' partial maxima and sums."""
        bm, bk = side * rows, side * keys
        return (bm * (Dk + 1), bk * (Dk + 1), bk * side * -(-Dv // side), bm * (bk + 1), bm * side)

    def form(self, inputs: Sequence[TensorType], info: DeviceInfo, mode: int = -1) -> str:
        """The plan (one of ``FORMS``) the device runs these inputs (q, k, v as (B, H, S, D)) with (``mode``:
        qk_matmul_output_mode).

        Few query rows (decoding) take the fused kernel; longer query blocks the blocked kernel on GPUs (the tiled
        one up to ``TILED_KEYS_MAX`` keys where the blocked one does not fit), the composition on CPU devices
        (whose GEMM kernels do better there: the groups' barriers cost more than a score matrix), except where the
        score matrix would exceed ``COMPOSED_SCORES_MAX`` bytes."""
        q, v = inputs[0], inputs[2]
        fits = self._fits(inputs, info)
        tiles = mode != 3 and self._tiling(inputs, info) is not None
        blocks = mode != 3 and self._blocking(inputs, info) is not None
        forced = getattr(_state, "forced", None)
        if (forced == "fused" and fits) or (forced == "tiled" and tiles) or (forced == "blocked" and blocks) or \
                forced == "composed":
            return forced
        cpu = info.device_type == "cpu"
        # (on CPU devices the fused kernel's group barriers cost more than the composition's score matrix: BERT's
        # heads at 12 queries 1.2-1.7x slower on PoCL and lavapipe; half precision keeps it, its scores in float32)
        if fits and q.shape[2] <= FUSED_QUERIES and (not cpu or q.dtype.itemsize < 4):
            return "fused"
        if blocks and not cpu:
            return "blocked"
        if tiles and not cpu and v.shape[2] <= TILED_KEYS_MAX:
            return "tiled"
        if q.shape[0] * q.shape[1] * q.shape[2] * v.shape[2] * q.dtype.itemsize > COMPOSED_SCORES_MAX:
            return "blocked" if blocks else "tiled" if tiles else "fused" if fits else "composed"
        return "composed"

    def beats_vendor_products(self, inputs: Sequence[TensorType], attrs: dict[str, Any], info: DeviceInfo) -> bool:
        """Whether these inputs run faster as the op than as nodes whose products a vendor library (cuBLAS) runs:
        where the fused kernel takes them (decoding), or the blocked kernel with a group for every compute unit.
        On the H200 (replayed graphs' GPU time, the op also taking the heads' transposes), GPT-2's 4 heads of 128
        at batch 16: 0.883 ms as nodes, 0.814 blocked (BERT-mini 0.822, 0.758); at batch 1, 32 groups for 132
        compute units, 0.313 as nodes and 0.334 blocked."""
        heads = self.heads_major(inputs, attrs)
        form = self.form(heads, info, attrs["qk_matmul_output_mode"])
        if form != "blocked":
            return form == "fused"
        blocking = self._blocking(heads, info)
        assert blocking is not None
        B, Hq, Sq, _ = heads[0].shape
        return B * Hq * -(-Sq // (blocking[0] * blocking[1])) >= info.compute_units

    def plan(self, inputs, outputs, attrs, info):
        inputs = self.heads_major(inputs, attrs)
        form = self.form(inputs, info, attrs["qk_matmul_output_mode"])
        if form == "composed":
            return self._composed(inputs, attrs, info)
        if form == "tiled":
            return self._tiled(inputs, attrs, info)
        if form == "blocked":
            return self._blocked(inputs, attrs, info)
        return self._fused(inputs, attrs, info)

    def _at(self, attrs, which: str, s: str, d: str, dims: str = "") -> str:
        """The element index of ``which`` (q, k, v or y) at sequence position ``s``, head dimension ``d`` of
        head h, batch b (a key or value head h / G), in its layout; ``dims`` names the head size (default the
        scalars Dk, Dv)."""
        size = dims or ("Dv" if which in "vy" else "Dk")
        heads, length, head = ("Hq", "Sq", "h") if which in "qy" else ("Hk", "Skv", "(h / G)")
        if which == "k" and attrs.get("k_transposed"):
            return f"((b * Hk + h / G) * {size} + {d}) * Skv + {s}"
        if which != "y" and self.packed(attrs) is not None:  # (one row: q's, k's, v's heads)
            first = {"q": "0", "k": "Hq", "v": "(Hq + Hk)"}[which]
            return f"((b * {length} + {s}) * (Hq + 2 * Hk) + {first} + {head}) * {size} + {d}"
        if attrs["sequence_major"]["qkvy".index(which)]:
            return f"((b * {length} + {s}) * {heads} + {head}) * {size} + {d}"
        return f"((b * {heads} + {head}) * {length} + {s}) * {size} + {d}"

    def _shape_scalars(self, inputs, attrs) -> tuple[list[Param], list[Any]]:
        """The scalars both kernels take, and their values."""
        q, v = inputs[0], inputs[2]
        B, Hq, Sq, Dk = q.shape
        Hk, Skv, Dv = v.shape[1], v.shape[2], v.shape[3]
        mask, _ = self._extras(inputs)
        Lm = mask.shape[-1] if mask is not None else Skv
        sb, sh, sq = self.mask_strides(mask) if mask is not None else (0, 0, 0)
        acc = acc_type(dialect_type(q.dtype))
        names = ("R", "Hq", "Sq", "Skv", "Dk", "Dv", "G", "Hk", "offset", "left", "right", "Lm", "msb", "msh", "msq")
        values = [B * Hq * Sq, Hq, Sq, Skv, Dk, Dv, Hq // Hk, Hk, attrs["offset"], attrs["left_window_size"],
                  attrs["right_window_size"], Lm, sb, sh, sq]
        params = [Param(n, "int", "scalar") for n in names]
        params += [Param("scale", acc, "scalar"), Param("softcap", acc, "scalar")]
        return params, values + [attrs["scale"], attrs["softcap"]]

    def _buffers(self, inputs, attrs, fused: bool) -> tuple[list[Param], list[Any], str]:
        """Input buffers (q, k and v for the fused kernel, the score matrix ``sc`` for the composed one; the mask,
        nonpad), their args, and a variant tag."""
        mask, nonpad = self._extras(inputs)
        params = [Param(n, "T", "in") for n in ("q", "k", "v")] if fused else [Param("sc", "T", "inout")]
        args: list[Any] = [("in", 0), ("in", 1), ("in", 2)] if fused else [("tmp", 0)]
        tag = ""
        if mask is not None:
            kind = "uchar" if mask.dtype == np.bool_ else "T"
            params.append(Param("mask", kind, "in"))
            args.append(("in", 3))
            tag += "_mb" if kind == "uchar" else "_mf"
        if nonpad is not None:
            nt = dialect_type(nonpad.dtype)
            params.append(Param("nonpad", nt, "in"))
            args.append(("in", len(inputs) - 1))
            tag += f"_n{nt}"
        if attrs.get("k_transposed"):
            tag += "_kt"
        if any(attrs["sequence_major"]):
            tag += "_m" + "".join(str(f) for f in attrs["sequence_major"])
        if self.packed(attrs) is not None:
            tag += "_p"
        if attrs.get("nan_rows"):
            tag += "_nr"
        if attrs["is_causal"]:
            tag += "_c"
        if attrs["left_window_size"] >= 0 or attrs["right_window_size"] >= 0:
            tag += "_w"
        if attrs["softcap"] > 0:
            tag += "_s"
        mode = attrs["qk_matmul_output_mode"]
        if mode >= 0:
            tag += f"_qk{mode}"
        return params, args, tag

    def _kernel_params(self, inputs, attrs) -> tuple[list[Param], list[Any], str, list[Param], list[Any]]:
        """The fused and tiled kernels' buffers (q, k, v, the mask, nonpad, y, and qk where asked) and their args, the
        variant tag, the shape scalars and their values."""
        buffers, args, tag = self._buffers(inputs, attrs, fused=True)
        buffers.append(Param("y", "T", "out"))
        args.append(("out", 0))
        if attrs["qk_matmul_output_mode"] >= 0:
            buffers.append(Param("qk", "T", "out"))
            args.append(("out", 1))
        scalars, values = self._shape_scalars(inputs, attrs)
        return buffers, args, tag, scalars, values

    def _bias_code(self, inputs, attrs, indent: str) -> str:
        """Dialect statements setting ACC ``bias`` for query i, key j of head h, batch b (``off`` defined)."""
        mask, nonpad = self._extras(inputs)
        ninf = "CAST(ACC, -DL_INF)"
        lines = ["ACC bias = CAST(ACC, 0.0f);"]
        if mask is not None:
            at = "mask[b * msb + h * msh + i * msq + j]"
            if mask.dtype == np.bool_:
                lines.append(f"if (j >= Lm || {at} == CAST(uchar, 0)) bias = {ninf};")
            else:
                lines.append(f"bias = j < Lm ? TO_ACC({at}) : {ninf};")
        blocked = []
        if attrs["is_causal"]:
            blocked.append("j > i + off")
        if attrs["left_window_size"] >= 0:
            blocked.append("i + off - j > left")
        if attrs["right_window_size"] >= 0:
            blocked.append("j - i - off > right")
        if nonpad is not None:
            blocked.append("j >= CAST(int, nonpad[b])")
        if blocked:
            lines.append(f"if ({' || '.join(f'({c})' for c in blocked)}) bias = {ninf};")
        return "".join(f"{indent}{line}\n" for line in lines)

    @staticmethod
    def _empty(attrs) -> str:
        """The factor of a row whose bias is -inf everywhere: 0 (zeros), or NaN with ``nan_rows``."""
        return "CAST(ACC, DL_NAN)" if attrs.get("nan_rows") else "CAST(ACC, 0.0f)"

    def _offset_code(self, inputs) -> str:
        _, nonpad = self._extras(inputs)
        return "CAST(int, nonpad[b]) - Sq" if nonpad is not None else "offset"

    def _score_code(self, inputs, attrs, indent: str, dot: str) -> str:
        """Statements making ACC ``t`` (score plus bias) from the product ``dot`` (an ACC expression), writing the
        qk output of modes 0-2 at ``qo``."""
        mode = attrs["qk_matmul_output_mode"]
        code = [f"ACC s = ({dot}) * scale;"]
        if mode == 0:
            code.append("qk[qo] = FROM_ACC(s);")
        if attrs["softcap"] > 0:
            code.append("s = softcap * dl_tanh(s / softcap);")
        if mode == 1:
            code.append("qk[qo] = FROM_ACC(s);")
        body = "".join(f"{indent}{c}\n" for c in code) + self._bias_code(inputs, attrs, indent)
        body += f"{indent}ACC t = s + bias;\n"
        if mode == 2:
            body += f"{indent}qk[qo] = FROM_ACC(t);\n"
        return body

    def _fused(self, inputs, attrs, info) -> Plan:
        q = inputs[0]
        elem = dialect_type(q.dtype)
        local = group_local(info, FUSED_GROUP)
        mode = attrs["qk_matmul_output_mode"]
        buffers, args, tag, scalars, values = self._kernel_params(inputs, attrs)
        at_k, q_at = self._at(attrs, "k", "j", "d"), self._at(attrs, "q", "i", "d")
        score = ("                ACC dot = CAST(ACC, 0.0f);\n"
                 f"                for (int d = 0; d < Dk; d++) dot = dot + qs[d] * TO_ACC(k[{at_k}]);\n"
                 "                int qo = row * Skv + j;\n"
                 + self._score_code(inputs, attrs, "                ", "dot"))
        ninf = "CAST(ACC, -DL_INF)"
        zero = "CAST(ACC, 0.0f)"
        body = [
            "    for (int row = GROUP(0); row < R; row += NGROUPS(0)) {\n",
            "        int i = row % Sq;\n        int h = (row / Sq) % Hq;\n        int b = row / (Sq * Hq);\n",
            f"        int off = {self._offset_code(inputs)};\n",
            f"        for (int d = LID(0); d < Dk; d += LSIZE(0)) qs[d] = TO_ACC(q[{q_at}]);\n",
            f"        for (int d = LID(0); d < Dv; d += LSIZE(0)) accs[d] = {zero};\n",
            "        BARRIER();\n",
            f"        ACC m = {ninf};\n        ACC l = {zero};\n        ACC seen = {zero};\n",
            "        for (int j0 = 0; j0 < Skv; j0 += LSIZE(0)) {\n",
            "            int j = j0 + LID(0);\n",
            f"            ACC tj = {ninf};\n",
            "            if (j < Skv) {\n", score,
            f"                if (bias > {ninf}) seen = CAST(ACC, 1.0f);\n",
            "                tj = t;\n            }\n",
            # the chunk's maximum: every item reads the chunk's scores (two barriers a chunk, no tree)
            "            red[LID(0)] = tj;\n            BARRIER();\n",
            "            int n = Skv - j0 < LSIZE(0) ? Skv - j0 : LSIZE(0);\n",
            f"            ACC cm = {ninf};\n",
            "            for (int jj = 0; jj < n; jj++) cm = dl_max(cm, red[jj]);\n",
            "            ACC mn = dl_max(m, cm);\n",
            f"            ACC base = mn == {ninf} ? {zero} : mn;\n",
            f"            ACC corr = m == {ninf} ? {zero} : dl_exp(m - base);\n",
            f"            ACC p = j < Skv ? dl_exp(tj - base) : {zero};\n",
            "            l = l * corr + p;\n",
            "            ps[LID(0)] = p;\n            BARRIER();\n",
            # (ps is rewritten after the next chunk's first barrier, red after this one: no third barrier)
            "            for (int d = LID(0); d < Dv; d += LSIZE(0)) {\n",
            "                ACC a = accs[d] * corr;\n",
            "                for (int jj = 0; jj < n; jj++) "
            f"a = a + ps[jj] * TO_ACC(v[{self._at(attrs, 'v', 'j0 + jj', 'd')}]);\n",
            "                accs[d] = a;\n            }\n",
            "            m = mn;\n        }\n",
            group_reduce("l", add), group_reduce("seen", fmax),
            f"        ACC inv = (seen == {zero} || l == {zero}) ? {self._empty(attrs)} : CAST(ACC, 1.0f) / l;\n",
            f"        for (int d = LID(0); d < Dv; d += LSIZE(0)) y[{self._at(attrs, 'y', 'i', 'd')}] = "
            "FROM_ACC(accs[d] * inv);\n",
        ]
        if mode == 3:  # the probabilities: each key scored again (the scores are not kept)
            body += [f"        ACC base = m == {ninf} ? {zero} : m;\n",
                     "        for (int j = LID(0); j < Skv; j += LSIZE(0)) {\n",
                     score.replace("                ", "            "),
                     "            qk[qo] = FROM_ACC(dl_exp(t - base) * inv);\n        }\n"]
        body.append("        BARRIER();\n    }")
        acc = acc_type(elem)
        shared = ((acc, "qs", FUSED_HEAD_MAX), (acc, "accs", FUSED_HEAD_MAX), (acc, "ps", local), (acc, "red", local))
        spec = KernelSpec(f"attention_fused_{elem}{tag}_g{local}", (*buffers, *scalars), "".join(body), elem=elem,
                          shared=shared, local_size=(local,))
        R = values[0]
        gsize = groups_for(R * local, local, info)
        return Plan([Launch(spec, (*args, *values), gsize, (local,))])

    def _tile_plan(self, inputs, attrs, info, kind: str, tile_rows: int, local: int, body: str,
                   shared: Sequence[tuple[str, int]], defines: tuple) -> Plan:
        """One launch of a tile kernel (tiled or blocked): a work-group of ``local`` items per tile of ``tile_rows``
        query rows of one head, ``shared`` its (name, ACC count) arrays."""
        q = inputs[0]
        elem = dialect_type(q.dtype)
        B, Hq, Sq, _ = q.shape
        buffers, args, tag, scalars, values = self._kernel_params(inputs, attrs)
        tq = -(-Sq // tile_rows)
        scalars += [Param("TQ", "int", "scalar"), Param("NG", "int", "scalar")]
        values += [tq, B * Hq * tq]
        acc = acc_type(elem)
        spec = KernelSpec(f"attention_{kind}_{elem}{tag}", (*buffers, *scalars), body, elem=elem,
                          shared=tuple((acc, name, n) for name, n in shared), local_size=(local,), defines=defines)
        return Plan([Launch(spec, (*args, *values), groups_for(B * Hq * tq * local, local, info), (local,))])

    def _tiled(self, inputs, attrs, info) -> Plan:
        Dk, Dv = inputs[0].shape[3], inputs[2].shape[3]
        tiling = self._tiling(inputs, info)
        assert tiling is not None
        rows, lanes, keys = tiling
        sizes = self._tiled_shared(Dk, Dv, rows, lanes, keys)
        return self._tile_plan(inputs, attrs, info, f"tiled_q{Dk}_v{Dv}_k{keys}_r{rows}x{lanes}", rows, rows * lanes,
                               self._tiled_body(inputs, attrs, lanes > 1), list(zip(("ks", "vs", "ss", "red"), sizes)),
                               (("QD", Dk), ("VD", Dv), ("BK", keys), ("ROWS", rows), ("LANES", lanes)))

    def _key_end(self, inputs, attrs, rows: str) -> list[str]:
        """Statements setting ``jend``, the keys a tile of ``rows`` query rows sees: all of them where the qk output
        wants every score; else a causal tile's end at its last row's last visible key, and padded keys cut (every
        key past the end is -inf for every row)."""
        _, nonpad = self._extras(inputs)
        mode = attrs["qk_matmul_output_mode"]
        end = ["        int jend = Skv;\n"]
        if mode < 0 and attrs["is_causal"]:
            end.append(f"        int ilast = (tile + 1) * {rows} < Sq ? (tile + 1) * {rows} - 1 : Sq - 1;\n"
                       "        if (ilast + off + 1 < jend) jend = ilast + off + 1 > 0 ? ilast + off + 1 : 0;\n")
        if mode < 0 and nonpad is not None:
            end.append("        if (CAST(int, nonpad[b]) < jend) jend = CAST(int, nonpad[b]) > 0 ? "
                       "CAST(int, nonpad[b]) : 0;\n")
        return end

    def _tiled_body(self, inputs, attrs, merge: bool) -> str:
        """The tiled kernel's body: item ``LID`` is lane ``LID % LANES`` of row ``LID / LANES`` of its tile."""
        ninf = "CAST(ACC, -DL_INF)"
        zero = "CAST(ACC, 0.0f)"
        end = self._key_end(inputs, attrs, "ROWS")
        load_k = ("                int kk = e % BK;\n                int d = e / BK;\n"
                  if attrs.get("k_transposed") else
                  "                int kk = e / QD;\n                int d = e % QD;\n")
        k_at = self._at(attrs, "k", "j0 + kk", "d", "QD")
        load_k += f"                ks[kk * (QD + 1) + d] = kk < n ? TO_ACC(k[{k_at}]) : CAST(ACC, 0.0f);\n"
        q_at, v_at = self._at(attrs, "q", "i", "d", "QD"), self._at(attrs, "v", "j0 + kk", "e % VD", "VD")
        y_at = self._at(attrs, "y", "i", "d", "VD")
        # the product of a query row and a key with four partial sums (no chain of dependent adds)
        dot = ["                    int kb = kk * (QD + 1);\n",
               f"                    ACC d0 = {zero};\n                    ACC d1 = {zero};\n",
               f"                    ACC d2 = {zero};\n                    ACC d3 = {zero};\n",
               "                    UNROLL for (int d = 0; d + 3 < QD; d += 4) {\n",
               "                        d0 = d0 + qr[d] * ks[kb + d];\n",
               "                        d1 = d1 + qr[d + 1] * ks[kb + d + 1];\n",
               "                        d2 = d2 + qr[d + 2] * ks[kb + d + 2];\n",
               "                        d3 = d3 + qr[d + 3] * ks[kb + d + 3];\n",
               "                    }\n",
               "                    UNROLL for (int d = QD - QD % 4; d < QD; d++) d0 = d0 + qr[d] * ks[kb + d];\n",
               "                    ACC dot = (d0 + d1) + (d2 + d3);\n"]
        body = [
            "    for (int g = GROUP(0); g < NG; g += NGROUPS(0)) {\n",
            "        int tile = g % TQ;\n        int h = (g / TQ) % Hq;\n        int b = g / (TQ * Hq);\n",
            "        int lane = LID(0) % LANES;\n        int r = LID(0) / LANES;\n",
            "        int i = tile * ROWS + r;\n",
            "        int row = (b * Hq + h) * Sq + i;\n",
            f"        int off = {self._offset_code(inputs)};\n",
            *end,
            "        ACC qr[QD];\n        ACC o[VD];\n",
            f"        UNROLL for (int d = 0; d < QD; d++) qr[d] = {zero};\n",
            f"        UNROLL for (int d = 0; d < VD; d++) o[d] = {zero};\n",
            "        if (i < Sq) {\n",
            f"            UNROLL for (int d = 0; d < QD; d++) qr[d] = TO_ACC(q[{q_at}]);\n",
            "        }\n",
            f"        ACC m = {ninf};\n        ACC l = {zero};\n        ACC seen = {zero};\n",
            "        for (int j0 = 0; j0 < jend; j0 += BK) {\n",
            "            int n = jend - j0 < BK ? jend - j0 : BK;\n",
            "            for (int e = LID(0); e < BK * QD; e += LSIZE(0)) {\n", load_k, "            }\n",
            "            for (int e = LID(0); e < BK * VD; e += LSIZE(0)) {\n",
            "                int kk = e / VD;\n",
            f"                vs[kk * (VD + 1) + e % VD] = kk < n ? TO_ACC(v[{v_at}]) : CAST(ACC, 0.0f);\n",
            "            }\n",
            "            BARRIER();\n",
            "            if (i < Sq) {\n",
            f"                ACC cm = {ninf};\n",
            "                for (int kk = lane; kk < n; kk += LANES) {\n",
            "                    int j = j0 + kk;\n",
            *dot,
            "                    int qo = row * Skv + j;\n",
            self._score_code(inputs, attrs, "                    ", "dot"),
            f"                    if (bias > {ninf}) seen = CAST(ACC, 1.0f);\n",
            "                    ss[(kk / LANES) * LSIZE(0) + LID(0)] = t;\n",
            "                    cm = dl_max(cm, t);\n",
            "                }\n",
            "                ACC mn = dl_max(m, cm);\n",
            f"                ACC base = mn == {ninf} ? {zero} : mn;\n",
            f"                ACC corr = m == {ninf} ? {zero} : dl_exp(m - base);\n",
            "                l = l * corr;\n",
            "                UNROLL for (int d = 0; d < VD; d++) o[d] = o[d] * corr;\n",
            "                for (int kk = lane; kk < n; kk += LANES) {\n",
            "                    ACC p = dl_exp(ss[(kk / LANES) * LSIZE(0) + LID(0)] - base);\n",
            "                    l = l + p;\n",
            "                    int vb = kk * (VD + 1);\n",
            "                    UNROLL for (int d = 0; d < VD; d++) o[d] = o[d] + p * vs[vb + d];\n",
            "                }\n",
            "                m = mn;\n",
            "            }\n",
            "            BARRIER();\n",
            "        }\n",
        ]
        if merge:  # the lanes of a row fold into lane 0: their maxima, sums, seen flags, then outputs one by one
            body += [
                "        red[LID(0)] = m;\n        BARRIER();\n",
                f"        ACC top = {ninf};\n",
                "        for (int p = 0; p < LANES; p++) top = dl_max(top, red[r * LANES + p]);\n",
                "        BARRIER();\n",
                f"        ACC c = m == {ninf} ? {zero} : dl_exp(m - (top == {ninf} ? {zero} : top));\n",
                "        l = l * c;\n",
                "        UNROLL for (int d = 0; d < VD; d++) o[d] = o[d] * c;\n",
                "        red[LID(0)] = l;\n        BARRIER();\n",
                f"        l = {zero};\n",
                "        for (int p = 0; p < LANES; p++) l = l + red[r * LANES + p];\n",
                "        BARRIER();\n",
                "        red[LID(0)] = seen;\n        BARRIER();\n",
                "        for (int p = 0; p < LANES; p++) seen = dl_max(seen, red[r * LANES + p]);\n",
                "        BARRIER();\n",
                "        for (int p = 1; p < LANES; p++) {\n",
                "            if (lane == p) {\n",
                "                UNROLL for (int d = 0; d < VD; d++) vs[r * VD + d] = o[d];\n",
                "            }\n",
                "            BARRIER();\n",
                "            if (lane == 0) {\n",
                "                UNROLL for (int d = 0; d < VD; d++) o[d] = o[d] + vs[r * VD + d];\n",
                "            }\n",
                "            BARRIER();\n",
                "        }\n",
            ]
        body += [
            "        if (i < Sq && lane == 0) {\n",
            f"            ACC inv = (seen == {zero} || l == {zero}) ? {self._empty(attrs)} : CAST(ACC, 1.0f) / l;\n",
            f"            UNROLL for (int d = 0; d < VD; d++) y[{y_at}] = FROM_ACC(o[d] * inv);\n",
            "        }\n",
            "    }",
        ]
        return "".join(body)

    def _blocked(self, inputs, attrs, info) -> Plan:
        Dk, Dv = inputs[0].shape[3], inputs[2].shape[3]
        blocking = self._blocking(inputs, info)
        assert blocking is not None
        side, rows, keys = blocking
        local, cols = side * side, -(-Dv // side)
        sizes = self._blocked_shared(Dk, Dv, side, rows, keys)
        defines = (("QD", Dk), ("VD", Dv), ("TX", side), ("TY", side), ("TM", rows), ("KC", keys),
                   ("BM", side * rows), ("BK", side * keys), ("VC", cols), ("VS", side * cols), ("NT", local),
                   ("LQ", -(-side * rows * Dk // local)), ("LK", -(-side * keys * Dk // local)),
                   ("LV", -(-side * keys * side * cols // local)))
        return self._tile_plan(inputs, attrs, info, f"blocked_q{Dk}_v{Dv}_s{side}_r{rows}_k{keys}", side * rows,
                               local, self._blocked_body(inputs, attrs),
                               list(zip(("qs", "ks", "vs", "ps", "red"), sizes)), defines)

    def _blocked_body(self, inputs, attrs) -> str:
        """The blocked kernel's body: item ``LID`` = ty·TX + tx takes query rows ty + TY·r (r < TM) of its tile,
        keys tx + TX·c (c < KC) of each block and output columns tx + TX·c (c < VC)."""
        ninf = "CAST(ACC, -DL_INF)"
        zero = "CAST(ACC, 0.0f)"
        end = self._key_end(inputs, attrs, "BM")
        kk_d = ("int kk = e % BK; int d = e / BK;" if attrs.get("k_transposed") else "int kk = e / QD; int d = e % QD;")

        def fetch(first: str, indent: str) -> str:
            """Statements reading the key and value block from key ``first`` into registers (kr, vr): every load
            of the block issued before any is waited for."""
            k_at = self._at(attrs, "k", f"{first} + kk", "d", "QD")
            v_at = self._at(attrs, "v", f"{first} + kk", "d", "VD")
            return (f"{indent}UNROLL for (int u = 0; u < LK; u++) {{\n"
                    f"{indent}    int e = LID(0) + u * NT; {kk_d}\n"
                    f"{indent}    kr[u] = e < BK * QD && {first} + kk < jend ? TO_ACC(k[{k_at}]) : {zero};\n"
                    f"{indent}}}\n"
                    f"{indent}UNROLL for (int u = 0; u < LV; u++) {{\n"
                    f"{indent}    int e = LID(0) + u * NT; int kk = e / VS; int d = e % VS;\n"
                    f"{indent}    vr[u] = e < BK * VS && {first} + kk < jend && d < VD ? TO_ACC(v[{v_at}]) : {zero};\n"
                    f"{indent}}}\n")
        score = self._score_code(inputs, attrs, "                        ", "sc[r * KC + c]")
        q_at = self._at(attrs, "q", "tile * BM + e / QD", "e % QD", "QD")
        y_at = self._at(attrs, "y", "i", "d", "VD")
        body = [
            "    int tx = LID(0) % TX;\n    int ty = LID(0) / TX;\n",
            "    for (int g = GROUP(0); g < NG; g += NGROUPS(0)) {\n",
            "        int tile = g % TQ;\n        int h = (g / TQ) % Hq;\n        int b = g / (TQ * Hq);\n",
            f"        int off = {self._offset_code(inputs)};\n",
            *end,
            "        ACC qr[LQ];\n        ACC kr[LK];\n        ACC vr[LV];\n",
            "        UNROLL for (int u = 0; u < LQ; u++) {\n",
            "            int e = LID(0) + u * NT;\n",
            f"            qr[u] = e < BM * QD && tile * BM + e / QD < Sq ? TO_ACC(q[{q_at}]) : {zero};\n",
            "        }\n",
            fetch("0", "        "),
            "        UNROLL for (int u = 0; u < LQ; u++) {\n",
            "            int e = LID(0) + u * NT;\n",
            "            if (e < BM * QD) qs[(e / QD) * (QD + 1) + e % QD] = qr[u];\n",
            "        }\n",
            "        ACC m[TM];\n        ACC l[TM];\n        ACC seen[TM];\n        ACC o[TM * VC];\n",
            f"        UNROLL for (int r = 0; r < TM; r++) {{ m[r] = {ninf}; l[r] = {zero}; seen[r] = {zero}; }}\n",
            f"        UNROLL for (int e = 0; e < TM * VC; e++) o[e] = {zero};\n",
            "        for (int j0 = 0; j0 < jend; j0 += BK) {\n",
            "            int n = jend - j0 < BK ? jend - j0 : BK;\n",
            "            UNROLL for (int u = 0; u < LK; u++) {\n",
            f"                int e = LID(0) + u * NT; {kk_d}\n",
            "                if (e < BK * QD) ks[kk * (QD + 1) + d] = kr[u];\n",
            "            }\n",
            "            UNROLL for (int u = 0; u < LV; u++) {\n",
            "                int e = LID(0) + u * NT;\n",
            "                if (e < BK * VS) vs[e] = vr[u];\n",
            "            }\n",
            "            BARRIER();\n",
            # the next block's loads are in flight while this one is computed
            "            if (j0 + BK < jend) {\n",
            fetch("(j0 + BK)", "                "),
            "            }\n",
            # the block's scores: TM rows x KC keys an item, from TM + KC shared reads per head dimension
            "            ACC sc[TM * KC];\n",
            f"            UNROLL for (int e = 0; e < TM * KC; e++) sc[e] = {zero};\n",
            "            UNROLL for (int d = 0; d < QD; d++) {\n",
            "                ACC qa[TM];\n                ACC kb[KC];\n",
            "                UNROLL for (int r = 0; r < TM; r++) qa[r] = qs[(ty + TY * r) * (QD + 1) + d];\n",
            "                UNROLL for (int c = 0; c < KC; c++) kb[c] = ks[(tx + TX * c) * (QD + 1) + d];\n",
            "                UNROLL for (int r = 0; r < TM; r++) {\n",
            "                    UNROLL for (int c = 0; c < KC; c++)\n",
            "                        sc[r * KC + c] = sc[r * KC + c] + qa[r] * kb[c];\n",
            "                }\n",
            "            }\n",
            # scale, softcap, bias; each row's maximum over the item's keys, then over the row's items
            "            UNROLL for (int r = 0; r < TM; r++) {\n",
            "                int i = tile * BM + ty + TY * r;\n",
            "                int row = (b * Hq + h) * Sq + i;\n",
            f"                ACC cm = {ninf};\n",
            "                UNROLL for (int c = 0; c < KC; c++) {\n",
            "                    int j = j0 + tx + TX * c;\n",
            f"                    ACC tj = {ninf};\n",
            "                    if (i < Sq && tx + TX * c < n) {\n",
            "                        int qo = row * Skv + j;\n",
            score,
            f"                        if (bias > {ninf}) seen[r] = CAST(ACC, 1.0f);\n",
            "                        tj = t;\n",
            "                    }\n",
            "                    sc[r * KC + c] = tj;\n",
            "                    cm = dl_max(cm, tj);\n",
            "                }\n",
            "                red[(ty + TY * r) * TX + tx] = cm;\n",
            "            }\n",
            "            BARRIER();\n",
            # the rows' new maxima (each item of a row finds the same), the block's probabilities into shared memory
            "            UNROLL for (int r = 0; r < TM; r++) {\n",
            f"                ACC cm = {ninf};\n",
            "                for (int p = 0; p < TX; p++) cm = dl_max(cm, red[(ty + TY * r) * TX + p]);\n",
            "                ACC mn = dl_max(m[r], cm);\n",
            f"                ACC base = mn == {ninf} ? {zero} : mn;\n",
            f"                ACC corr = m[r] == {ninf} ? {zero} : dl_exp(m[r] - base);\n",
            "                l[r] = l[r] * corr;\n",
            "                UNROLL for (int c = 0; c < VC; c++) o[r * VC + c] = o[r * VC + c] * corr;\n",
            "                UNROLL for (int c = 0; c < KC; c++) {\n",
            "                    ACC p = dl_exp(sc[r * KC + c] - base);\n",
            "                    l[r] = l[r] + p;\n",
            "                    ps[(ty + TY * r) * (BK + 1) + tx + TX * c] = p;\n",
            "                }\n",
            "                m[r] = mn;\n",
            "            }\n",
            "            BARRIER();\n",
            # the weighted values: TM rows x VC columns an item, from TM + VC shared reads per key
            "            for (int kk = 0; kk < n; kk++) {\n",
            "                ACC pr[TM];\n                ACC vv[VC];\n",
            "                UNROLL for (int r = 0; r < TM; r++) pr[r] = ps[(ty + TY * r) * (BK + 1) + kk];\n",
            "                UNROLL for (int c = 0; c < VC; c++) vv[c] = vs[kk * VS + tx + TX * c];\n",
            "                UNROLL for (int r = 0; r < TM; r++) {\n",
            "                    UNROLL for (int c = 0; c < VC; c++) o[r * VC + c] = o[r * VC + c] + pr[r] * vv[c];\n",
            "                }\n",
            "            }\n",
            "            BARRIER();\n",
            "        }\n",
            # the rows' sums and seen flags over their items
            "        UNROLL for (int r = 0; r < TM; r++) red[(ty + TY * r) * TX + tx] = l[r];\n",
            "        BARRIER();\n",
            "        UNROLL for (int r = 0; r < TM; r++) {\n",
            f"            l[r] = {zero};\n",
            "            for (int p = 0; p < TX; p++) l[r] = l[r] + red[(ty + TY * r) * TX + p];\n",
            "        }\n",
            "        BARRIER();\n",
            "        UNROLL for (int r = 0; r < TM; r++) red[(ty + TY * r) * TX + tx] = seen[r];\n",
            "        BARRIER();\n",
            "        UNROLL for (int r = 0; r < TM; r++) {\n",
            "            for (int p = 0; p < TX; p++) seen[r] = dl_max(seen[r], red[(ty + TY * r) * TX + p]);\n",
            "        }\n",
            "        UNROLL for (int r = 0; r < TM; r++) {\n",
            "            int i = tile * BM + ty + TY * r;\n",
            "            if (i < Sq) {\n",
            f"                ACC inv = (seen[r] == {zero} || l[r] == {zero}) ? {self._empty(attrs)} : "
            "CAST(ACC, 1.0f) / l[r];\n",
            "                UNROLL for (int c = 0; c < VC; c++) {\n",
            "                    int d = tx + TX * c;\n",
            f"                    if (d < VD) y[{y_at}] = FROM_ACC(o[r * VC + c] * inv);\n",
            "                }\n",
            "            }\n",
            "        }\n",
            "        BARRIER();\n",
            "    }",
        ]
        return "".join(body)

    def _composed(self, inputs, attrs, info) -> Plan:
        q, v = inputs[0], inputs[2]
        elem = dialect_type(q.dtype)
        B, Hq, Sq, Dk = q.shape
        Hk, Skv, Dv = v.shape[1], v.shape[2], v.shape[3]
        G = Hq // Hk
        mode = attrs["qk_matmul_output_mode"]
        major = attrs["sequence_major"]
        temps = [TensorType((B, Hq, Sq, Skv), q.dtype)]
        if major[3]:  # the products write (B, H, S, Dv); a copy puts it sequence-major
            temps.append(TensorType((B, Hq, Sq, Dv), q.dtype))
        steps: list[Any] = []
        qkv_args: list[Any] = [("in", 0), ("in", 1), ("in", 2)]
        if self.packed(attrs) is not None:  # (the products read q, k and v copied apart)
            width = (Hq + 2 * Hk) * Dk
            for i, (heads, first) in enumerate(zip((Hq, Hk, Hk), self.first_heads(attrs))):
                temps.append(TensorType((B, heads, Sq, Dk), q.dtype))
                qkv_args[i] = ("tmp", len(temps) - 1)
                step = copy_launch(q.dtype, ("in", i), qkv_args[i], (B, heads, Sq, Dk), (Sq * width, Dk, width, 1),
                                   first * Dk, (heads * Sq * Dk, Sq * Dk, Dk, 1), 0, info, self.name)
                steps += [step] if step is not None else []
            major = (0, 0, 0, major[3])
        # scores (B, Hk, G, Sq, Skv) = q · kᵀ, the G query heads of a key head reading it with stride 0; k read
        # across its rows, or kᵀ along them
        # q's strides: (row, batch, key head, query head of a key head); k's: (head dimension, key, batch, head)
        q_st = (Hq * Dk, Sq * Hq * Dk, G * Dk, Dk) if major[0] else (Dk, Hq * Sq * Dk, G * Sq * Dk, Sq * Dk)
        k_st = (Skv, 1, Hk * Dk * Skv, Dk * Skv) if attrs.get("k_transposed") else \
            (1, Hk * Dk, Skv * Hk * Dk, Dk) if major[1] else (1, Dk, Hk * Skv * Dk, Skv * Dk)
        qk_batch = [(B, q_st[1], k_st[2]), (Hk, q_st[2], k_st[3]), (G, q_st[3], 0)]
        steps += gemm_steps(info, elem, Sq, Skv, Dk, q_st[0], 1, k_st[0], k_st[1], qk_batch, a_arg=qkv_args[0],
                            b_arg=qkv_args[1], y_arg=("tmp", 0))
        buffers, args, tag = self._buffers(inputs, attrs, fused=False)
        if mode >= 0:
            buffers.append(Param("qk", "T", "out"))
            args.append(("out", 1))
        scalars, values = self._shape_scalars(inputs, attrs)
        ninf = "CAST(ACC, -DL_INF)"
        zero = "CAST(ACC, 0.0f)"
        score = "            int qo = row * Skv + j;\n" + self._score_code(inputs, attrs, "            ",
                                                                         "TO_ACC(sc[qo])")
        # a work-group per row where rows are long (as the softmax op's kernel): its items read adjacent scores
        grouped = grouped_rows(values[0], Skv, info)
        head = "    for (int row = GROUP(0); row < R; row += NGROUPS(0)) {\n" if grouped else "    FOR_EACH(row, R) {\n"
        loop = "        for (int j = LID(0); j < Skv; j += LSIZE(0)) {\n" if grouped else \
            "        for (int j = 0; j < Skv; j++) {\n"
        body = (head
                + "        int i = row % Sq;\n        int h = (row / Sq) % Hq;\n        int b = row / (Sq * Hq);\n"
                f"        int off = {self._offset_code(inputs)};\n"
                f"        ACC m = {ninf};\n        ACC seen = {zero};\n"
                + loop + score
                + f"            if (bias > {ninf}) seen = CAST(ACC, 1.0f);\n            m = dl_max(m, t);\n        }}\n"
                + (group_reduce("m", fmax) + group_reduce("seen", fmax) if grouped else "")
                + f"        ACC base = m == {ninf} ? {zero} : m;\n        ACC l = {zero};\n"
                + loop + score
                + "            ACC p = dl_exp(t - base);\n            l = l + p;\n"
                "            sc[qo] = FROM_ACC(p);\n        }\n"
                + (group_reduce("l", add) if grouped else "")
                + f"        ACC inv = (seen == {zero} || l == {zero}) ? {self._empty(attrs)} : CAST(ACC, 1.0f) / l;\n"
                + loop + "            int qo = row * Skv + j;\n"
                "            ACC p = TO_ACC(sc[qo]) * inv;\n            sc[qo] = FROM_ACC(p);\n"
                + ("            qk[qo] = FROM_ACC(p);\n" if mode == 3 else "") + "        }\n    }")
        if grouped:
            local = group_local(info)
            spec = KernelSpec(f"attention_softmax_{elem}{tag}_g{local}", (*buffers, *scalars), body, elem=elem,
                              shared=((acc_type(elem), "red", local),), local_size=(local,))
            steps.append(Launch(spec, (*args, *values), groups_for(values[0] * local, local, info), (local,)))
        else:
            spec = KernelSpec(f"attention_softmax_{elem}{tag}", (*buffers, *scalars), body, elem=elem)
            local = local_1d(info)
            steps.append(Launch(spec, (*args, *values), groups_for(values[0], local, info), (local,)))
        # y (B, Hk, G, Sq, Dv) = probabilities · v
        # (v's strides: key, batch, head)
        v_st = (Hk * Dv, Skv * Hk * Dv, Dv) if major[2] else (Dv, Hk * Skv * Dv, Skv * Dv)
        pv_batch = [(B, Hq * Sq * Skv, v_st[1]), (Hk, G * Sq * Skv, v_st[2]), (G, Sq * Skv, 0)]
        y_arg: tuple = ("tmp", 1) if major[3] else ("out", 0)
        steps += gemm_steps(info, elem, Sq, Dv, Skv, Skv, 1, v_st[0], 1, pv_batch, a_arg=("tmp", 0),
                            b_arg=qkv_args[2], y_arg=y_arg)
        if major[3]:
            step = copy_launch(q.dtype, ("tmp", 1), ("out", 0), (B, Sq, Hq, Dv), (Hq * Sq * Dv, Dv, Sq * Dv, 1), 0,
                               (Sq * Hq * Dv, Hq * Dv, Dv, 1), 0, info, self.name)
            steps += [step] if step is not None else []
        return Plan(steps, temps)

"""Signal processing: DFT (opsets 17 and 20), STFT, HannWindow, HammingWindow, BlackmanWindow, MelWeightMatrix.

A DFT of known length is a matrix product: the transformed axis is brought next to the real/imaginary axis,
the two are flattened into rows of ``n * channels`` values, and the rows are multiplied by a constant matrix of
twiddle factors (computed in float64, with the exact values at multiples of a quarter turn, so that the bins
that are zero stay zero) which also applies the zero-padding or truncation to ``dft_length``, the one-sided
output, the inverse's 1/n, and the real output of the inverse one-sided transform.  STFT gathers the frames,
folds a constant window into the matrix (a window computed at run time multiplies the frames), and transforms
them the same way.  The windows and the mel filter bank depend only on their scalar inputs: they are constants
of the plan (also when the loader folds them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import GraphError, UnsupportedOp
from ..loader import Context, np_dtype
from .base import FOLDERS, Tensor, cast, converter, reshape

#: the largest DFT matrix a node may build (bytes): the dense product is O(n^2) in time and memory
MAX_MATRIX_BYTES = 1 << 28


# -- DFT matrices ----------------------------------------------------------------------------------------------------
def twiddles(length: int, rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of 2 pi (row * col mod length) / length, exact at multiples of a quarter turn."""
    r = np.outer(rows, cols) % length
    theta = 2 * np.pi * r / length
    c, s = np.cos(theta), np.sin(theta)
    half, quarter, three = 2 * r == length, 4 * r == length, 4 * r == 3 * length
    c = np.where(r == 0, 1.0, np.where(half, -1.0, np.where(quarter | three, 0.0, c)))
    s = np.where((r == 0) | half, 0.0, np.where(quarter, 1.0, np.where(three, -1.0, s)))
    return c, s


def dft_matrix(n: int, channels: int, length: int, inverse: bool, onesided: bool) -> tuple[np.ndarray, int, int]:
    """(matrix, bins, output channels) of the DFT of ``n`` input points of ``channels`` (1 real, 2 complex) values
    padded or truncated to ``length``: rows ``(n, channels)`` flattened, columns ``(bins, output channels)``.

    Forward: bins ``length`` (``length // 2 + 1`` one-sided), complex out.  Inverse: complex out over ``length``
    bins scaled by 1/length; one-sided inverse (the real inverse of a one-sided spectrum): real out of
    ``length`` points from the first ``length // 2 + 1`` input bins, the others' conjugates implied."""
    used = min(n, length)
    if inverse and onesided:
        bins = min(used, length // 2 + 1)
        c, s = twiddles(length, np.arange(bins), np.arange(length))  # (bins, length)
        weight = np.full(bins, 2.0)
        weight[0] = 1.0
        if length % 2 == 0 and bins > length // 2:
            weight[length // 2] = 1.0
        m = np.zeros((n, channels, length))
        m[:bins, 0] = weight[:, None] * c / length
        if channels == 2:
            m[:bins, 1] = -weight[:, None] * s / length
        return m.reshape(n * channels, length), length, 1
    bins = length // 2 + 1 if onesided else length
    c, s = twiddles(length, np.arange(used), np.arange(bins))  # (used, bins)
    sign = 1.0 if inverse else -1.0
    m = np.zeros((n, channels, bins, 2))
    m[:used, 0, :, 0], m[:used, 0, :, 1] = c, sign * s
    if channels == 2:
        m[:used, 1, :, 0], m[:used, 1, :, 1] = -sign * s, c
    if inverse:
        m /= length
    return m.reshape(n * channels, bins * 2), bins, 2


def apply_dft(ctx: Context, x: Tensor, axis: int, matrix: np.ndarray, bins: int, out_channels: int) -> Tensor:
    """``x`` (..., n along ``axis``, ..., channels) times ``matrix`` along (axis, channels): the axis becomes
    ``bins`` long and the last axis ``out_channels``."""
    shape = tuple(x.shape)
    rank = len(shape)
    if matrix.nbytes > MAX_MATRIX_BYTES:
        raise UnsupportedOp(f"a DFT of {shape[axis]} points needs a {matrix.nbytes}-byte matrix (devicelayer "
                            f"composes a DFT as a dense matrix product; at most {MAX_MATRIX_BYTES} bytes)")
    narrow = x.dtype if x.dtype == np.float16 else None  # float16 transforms in float32
    y = cast(ctx, x, np.float32, "to_float") if narrow is not None else x
    perm = [d for d in range(rank - 1) if d != axis] + [axis, rank - 1]
    if perm != list(range(rank)):
        y = ctx.op("transpose", [y], "to_rows", perm=tuple(perm))
    rest = [shape[d] for d in perm[:-2]]
    rows = int(np.prod(rest, dtype=np.int64))
    y = reshape(ctx, y, (rows, shape[axis] * shape[-1]), "rows")
    y = ctx.op("matmul", [y, matrix.astype(y.dtype)], "dft")
    y = reshape(ctx, y, (*rest, bins, out_channels), "bins")
    if perm != list(range(rank)):
        y = ctx.op("transpose", [y], "from_rows", perm=tuple(int(p) for p in np.argsort(perm)))
    return cast(ctx, y, narrow, "") if narrow is not None else y


def _scalar_int(value: np.ndarray | None, what: str) -> int | None:
    if value is None:
        return None
    v = np.asarray(value)
    if v.size != 1 or v.dtype.kind not in "iu":
        raise GraphError(f"{what} must be an integer scalar, got {v.dtype} of shape {v.shape}")
    return int(v.reshape(-1)[0])


@converter("DFT")
def _dft(ctx: Context, attrs: dict[str, Any]) -> list[Tensor]:
    x = ctx.raw(0)
    rank = len(x.shape)
    if rank < 2 or x.shape[-1] not in (1, 2):
        raise GraphError(f"DFT input must end with a real (1) or complex (2) axis, got shape {tuple(x.shape)}")
    if x.dtype.kind != "f":
        raise GraphError(f"DFT needs a floating-point input, got {x.dtype}")
    if ctx.opset >= 20:
        axis = _scalar_int(ctx.need_const(2, "DFT axis"), "axis")
        axis = -2 if axis is None else axis
    else:
        axis = int(attrs.get("axis", 1))
    if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
        raise GraphError(f"DFT axis {axis} must lie in [{-rank}, -2] or [0, {rank - 2}] for a rank-{rank} input")
    axis %= rank
    inverse, onesided = bool(attrs.get("inverse", 0)), bool(attrs.get("onesided", 0))
    n = x.shape[axis]
    length = _scalar_int(ctx.need_const(1, "DFT dft_length"), "dft_length")
    if length is None:
        length = 2 * (n - 1) if inverse and onesided else n
    if length < 1:
        raise GraphError(f"dft_length must be positive, got {length}")
    matrix, bins, out_channels = dft_matrix(n, x.shape[-1], length, inverse, onesided)
    return [apply_dft(ctx, x, axis, matrix, bins, out_channels)]


@converter("STFT")
def _stft(ctx: Context, attrs: dict[str, Any]) -> list[Tensor]:
    signal = ctx.raw(0)
    if len(signal.shape) != 3 or signal.shape[-1] not in (1, 2):
        raise GraphError(f"STFT signal must be (batch, length, 1 or 2), got {tuple(signal.shape)}")
    if signal.dtype.kind != "f":
        raise GraphError(f"STFT needs a floating-point signal, got {signal.dtype}")
    step = _scalar_int(ctx.need_const(1, "STFT frame_step"), "frame_step")
    window = ctx.raw(2) if ctx.has(2) else None
    frame = _scalar_int(ctx.need_const(3, "STFT frame_length"), "frame_length")
    if window is not None and (len(window.shape) != 1 or (frame is not None and window.shape[0] != frame)):
        raise GraphError(f"the STFT window must be 1-D of frame_length {frame}, got shape {tuple(window.shape)}")
    if frame is None:
        frame = window.shape[0] if window is not None else signal.shape[1]
    length = signal.shape[1]
    if step is None or step < 1 or not 1 <= frame <= length:
        raise GraphError(f"STFT needs frame_step >= 1 and 1 <= frame_length <= {length}; got {step} and {frame}")
    frames = 1 + (length - frame) // step
    onesided = bool(attrs.get("onesided", 1)) and signal.shape[-1] == 1
    channels = signal.shape[-1]
    index = np.arange(frames)[:, None] * step + np.arange(frame)[None, :]
    y = ctx.op("gather", [signal, index.astype(np.int64)], "frames", axis=1)  # (batch, frames, frame, channels)
    matrix, bins, out_channels = dft_matrix(frame, channels, frame, False, onesided)
    if isinstance(window, np.ndarray):  # a constant window scales the matrix's rows
        matrix = matrix * np.repeat(window.astype(np.float64), channels)[:, None]
    elif window is not None:
        w = window if window.dtype == signal.dtype else cast(ctx, window, signal.dtype, "window")
        y = ctx.op("mul", [y, reshape(ctx, w, (frame, 1), "window_column")], "windowed")
    return [apply_dft(ctx, y, 2, matrix, bins, out_channels)]


# -- windows --------------------------------------------------------------------------------------------------------
def window(kind: str, size: int, periodic: bool) -> np.ndarray:
    """The float64 window ``kind`` (HannWindow, HammingWindow, BlackmanWindow) of ``size`` points."""
    if size < 0:
        raise GraphError(f"{kind} size must be non-negative, got {size}")
    if size == 1:  # a one-point window is 1 (as PyTorch's windows are)
        return np.ones(1)
    n = np.arange(size, dtype=np.float64)
    x = 2 * np.pi * n / (size if periodic else size - 1)
    if kind == "HannWindow":
        return np.sin(x / 2) ** 2
    if kind == "HammingWindow":
        alpha = 25 / 46
        return alpha - (1 - alpha) * np.cos(x)
    return 0.42 - 0.5 * np.cos(x) + 0.08 * np.cos(2 * x)


def _window_of(kind: str, attrs: dict[str, Any], size: np.ndarray | None) -> np.ndarray:
    n = _scalar_int(size, f"{kind} size")
    if n is None:
        raise GraphError(f"{kind} needs its size input")
    dtype = np_dtype(int(attrs.get("output_datatype", 1)))
    return window(kind, n, bool(attrs.get("periodic", 1))).astype(dtype)


@converter("HannWindow", "HammingWindow", "BlackmanWindow")
def _window(ctx: Context, attrs: dict[str, Any]) -> list[Tensor]:
    kind = ctx.node.op_type
    return [_window_of(kind, attrs, ctx.need_const(0, f"{kind} size"))]


for _kind in ("HannWindow", "HammingWindow", "BlackmanWindow"):
    FOLDERS[_kind] = lambda ctx, attrs, ins, kind=_kind: [_window_of(kind, attrs, ins[0])]


# -- mel filter bank ------------------------------------------------------------------------------------------------
def mel_weight_matrix(num_mel_bins: Any, dft_length: Any, sample_rate: Any, lower_edge_hertz: Any,
                      upper_edge_hertz: Any) -> np.ndarray:
    """ONNX MelWeightMatrix as float64 (dft_length // 2 + 1, num_mel_bins): triangles of peak 1 between mel-spaced
    bin edges, with the edges rounded down to spectrogram bins as ONNX's reference computes them (the hertz edges
    keep their own dtype, so a float32 edge rounds as it does there)."""
    mels, length, rate = int(num_mel_bins), int(dft_length), int(sample_rate)
    if mels < 1 or length < 1 or rate < 1:
        raise GraphError(f"MelWeightMatrix needs positive num_mel_bins, dft_length and sample_rate; got {mels}, "
                         f"{length} and {rate}")
    lower, upper = np.asarray(lower_edge_hertz).reshape(()), np.asarray(upper_edge_hertz).reshape(())
    spectrogram_bins = length // 2 + 1
    edges = np.arange(0, mels + 2)
    low_mel = 2595 * np.log1p(lower / 700) / np.log(10)
    high_mel = 2595 * np.log1p(upper / 700) / np.log(10)
    step = (high_mel - low_mel) / edges.shape[0]
    hertz = 700 * np.expm1((edges * step + low_mel) / 2595 * np.log(10))
    edge = (((length + 1) * hertz) // rate).astype(np.int64)
    left, center, right = edge[:-2], edge[1:-1], edge[2:]
    j = np.arange(spectrogram_bins)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        rise = np.where(center > left, (j - left) / (center - left), (j == center).astype(np.float64))
        fall = (right - j) / (right - center)
    out = np.where((j >= left) & (j <= center), rise, 0.0)
    return np.where((j >= center) & (j < right) & (right > center), fall, out)


def _mel_of(attrs: dict[str, Any], ins: list[np.ndarray | None]) -> np.ndarray:
    if any(v is None for v in ins):
        raise GraphError("MelWeightMatrix needs all five inputs")
    dtype = np_dtype(int(attrs.get("output_datatype", 1)))
    return mel_weight_matrix(*ins).astype(dtype)


@converter("MelWeightMatrix")
def _mel(ctx: Context, attrs: dict[str, Any]) -> list[Tensor]:
    names = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")
    return [_mel_of(attrs, [ctx.need_const(i, f"MelWeightMatrix {name}") for i, name in enumerate(names)])]


FOLDERS["MelWeightMatrix"] = lambda ctx, attrs, ins: [_mel_of(attrs, list(ins))]

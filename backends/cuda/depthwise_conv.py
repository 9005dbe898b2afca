"""Depthwise 2-D convolutions over channels-last activations as one CUDA kernel.

cuDNN's channels-last depthwise kernels are slow for large windows (ConvNeXt's 7x7 at 96 channels, 56x56, batch
16 in float16: 0.63 ms, against 0.20 NCHW), and an NCHW depthwise layer between channels-last neighbours pays
two conversions. Here one thread computes ``V`` neighbouring channels (one vector load: channels are innermost)
at ``TW`` neighbouring output columns: per kernel row it loads the input columns those outputs share once into
registers, then multiplies them by the row's taps, accumulating in float32. Bias, a summand of the output's shape
and ReLU are applied before the one store. The taps are read as (kH * kW, C), so that a warp reads them in one
piece: constant filters are relaid once, others into scratch on each call.

Window, strides, dilations, ``V`` and ``TW`` are compile-time constants (one compile per layer geometry and
choice); a layer's (V, TW) is tuned with its other channels-last routes and kept in the disk cache.
"""

from __future__ import annotations

import math
from typing import Any

import cupy
import numpy as np

from . import vector_kernels
from .backend import _cupy_at as _at
from .timing import gpu_ms

#: element types the kernel takes
DTYPES = vector_kernels.DTYPES
#: threads of a block
BLOCK = 128
#: (V, TW) choices a layer's tuning times, where its channels divide by V and its width is at least TW
CHOICES = ((2, 4), (2, 8), (4, 4), (1, 4))
#: the most taps a thread holds a row of at once (kW) and the most input columns it loads per row
MAX_WIDTH, MAX_COLUMNS = 15, 40

_SOURCE = r"""
extern "C" __global__ void __launch_bounds__(BLOCK) devicelayer_depthwise_last(
    const T* __restrict__ x, const T* __restrict__ taps, const T* __restrict__ bias, const T* __restrict__ z,
    T* __restrict__ y, long long total, int C, int IH, int IW, int OH, int OW, int PH, int PW)
{
    long long t = (long long)blockIdx.x * BLOCK + threadIdx.x;
    if (t >= total) return;
    const int CV = C / V, OWB = (OW + TW - 1) / TW;
    const int c0 = (int)(t % CV) * V; t /= CV;
    const int ow0 = (int)(t % OWB) * TW; t /= OWB;
    const int oh = (int)(t % OH);
    const long long n = t / OH;
    float acc[TW][V];
#pragma unroll
    for (int j = 0; j < TW; ++j)
#pragma unroll
        for (int k = 0; k < V; ++k) acc[j][k] = 0.f;
    const int iw0 = ow0 * SW - PW;
#pragma unroll
    for (int kh = 0; kh < KH; ++kh) {
        const int ih = oh * SH - PH + kh * DH;
        if (ih < 0 || ih >= IH) continue;
        const T* row = x + ((n * IH + ih) * IW) * (long long)C + c0;
        float xs[L][V];
#pragma unroll
        for (int l = 0; l < L; ++l) {
            const int iw = iw0 + l;
            if (iw >= 0 && iw < IW) {
                const vec_t v = *(const vec_t*)(row + (long long)iw * C);
#pragma unroll
                for (int k = 0; k < V; ++k) xs[l][k] = (float)v.v[k];
            } else {
#pragma unroll
                for (int k = 0; k < V; ++k) xs[l][k] = 0.f;
            }
        }
#pragma unroll
        for (int kw = 0; kw < KW; ++kw) {
            const vec_t w = *(const vec_t*)(taps + (kh * KW + kw) * C + c0);
#pragma unroll
            for (int j = 0; j < TW; ++j)
#pragma unroll
                for (int k = 0; k < V; ++k) acc[j][k] = fmaf(xs[j * SW + kw * DW][k], (float)w.v[k], acc[j][k]);
        }
    }
    float b[V];
#pragma unroll
    for (int k = 0; k < V; ++k) b[k] = HAS_BIAS ? (float)bias[c0 + k] : 0.f;
#pragma unroll
    for (int j = 0; j < TW; ++j) {
        if (ow0 + j >= OW) break;
        const long long o = ((n * OH + oh) * OW + ow0 + j) * (long long)C + c0;
        vec_t out;
        vec_t s;
        if (HAS_Z) s = *(const vec_t*)(z + o);
#pragma unroll
        for (int k = 0; k < V; ++k) {
            float v = acc[j][k] + b[k];
            if (HAS_Z) v += (float)s.v[k];
            out.v[k] = (T)((RELU && v <= 0.f) ? 0.f : v);
        }
        *(vec_t*)(y + o) = out;
    }
}
"""

def takes(ins: Any, outs: Any, attrs: dict) -> bool:
    """Whether the call is a 2-D depthwise convolution (one filter per channel) of a type the kernel takes, with
    no activation or ReLU, and a window the kernel holds."""
    xt, wt = ins[0], ins[1]
    if len(xt.shape) != 4 or xt.dtype not in DTYPES or attrs.get("activation") not in (None, "relu"):
        return False
    c = xt.shape[1]
    kw, sw, dw = wt.shape[3], attrs["strides"][1], attrs["dilations"][1]
    return (attrs["group"] == c and wt.shape[0] == c and wt.shape[1] == 1 and c > 0 and kw <= MAX_WIDTH
            and (4 - 1) * sw + (kw - 1) * dw + 1 <= MAX_COLUMNS and all(t.size < 2**31 for t in (*ins, *outs)))


def choices(ins: Any, outs: Any, attrs: dict) -> list[tuple[int, int]]:
    """The (V, TW) choices that fit the call."""
    c, ow = ins[0].shape[1], outs[0].shape[3]
    kw, sw, dw = ins[1].shape[3], attrs["strides"][1], attrs["dilations"][1]
    return [(v, tw) for v, tw in CHOICES if c % v == 0 and (tw <= ow or tw == 4)
            and (tw - 1) * sw + (kw - 1) * dw + 1 <= MAX_COLUMNS]


def _kernel(dtype: np.dtype, ins: Any, attrs: dict, v: int, tw: int) -> Any:
    """The kernel for one layer geometry and choice."""
    kh, kw = ins[1].shape[2:]
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilations"]
    return vector_kernels.compiled(
        _SOURCE, "devicelayer_depthwise_last", dtype, v, TW=tw, KH=kh, KW=kw, SH=sh, SW=sw, DH=dh, DW=dw,
        L=(tw - 1) * sw + (kw - 1) * dw + 1, BLOCK=BLOCK, HAS_BIAS=int(len(ins) >= 3), HAS_Z=int(len(ins) == 4),
        RELU=int(attrs.get("activation") == "relu"))


def taps(dev: Any, stream: Any, wt: Any, w: int, keep: list) -> int:
    """The address of filters ``wt`` (C, 1, kH, kW) at ``w`` relaid as (kH * kW, C) into scratch on ``stream``."""
    c, k = wt.shape[0], math.prod(wt.shape[2:])
    with stream:
        out = cupy.ascontiguousarray(_at(w, (c, k), wt.dtype, dev.index).T)
    keep.append(out)
    return int(out.data.ptr)


def relaid(w: np.ndarray) -> np.ndarray:
    """Constant filters (C, 1, kH, kW) as the kernel reads them, (kH * kW, C)."""
    return np.ascontiguousarray(w.reshape(w.shape[0], -1).T)


def run(stream: Any, ins: Any, outs: Any, attrs: dict, choice: tuple[int, int], x: int, w_taps: int, b: int,
        y: int, z: int) -> None:
    """Queue the layer on ``stream`` (device addresses, channels-last; ``w_taps`` as ``taps`` lays them out); a
    vector width the addresses are not aligned for is narrowed to one channel."""
    xt, yt = ins[0], outs[0]
    dtype = xt.dtype
    v, tw = choice
    if any(a % (v * dtype.itemsize) for a in (x, w_taps, b, y, z) if a):
        v = 1
    n, c, ih, iw = xt.shape
    oh, ow = yt.shape[2:]
    total = n * oh * -(-ow // tw) * (c // v)
    pads = attrs["pads"]
    kernel = _kernel(dtype, ins, attrs, v, tw)
    with stream:
        kernel(((total + BLOCK - 1) // BLOCK,), (BLOCK,),
               (np.uint64(x), np.uint64(w_taps), np.uint64(b or y), np.uint64(z or y), np.uint64(y),
                np.int64(total), np.int32(c), np.int32(ih), np.int32(iw), np.int32(oh), np.int32(ow),
                np.int32(pads[0]), np.int32(pads[1])))


def tune(stream: Any, ins: Any, outs: Any, attrs: dict, x: int, w_taps: int, b: int, y: int,
         z: int) -> tuple[tuple[int, int], float] | None:
    """((V, TW), GPU ms) of the fastest choice on these buffers, None where none ran."""
    best: tuple[tuple[int, int], float] | None = None
    for choice in choices(ins, outs, attrs):
        try:
            ms = gpu_ms(stream, lambda choice=choice: run(stream, ins, outs, attrs, choice, x, w_taps, b, y, z))
        except (cupy.cuda.compiler.CompileException, cupy.cuda.driver.CUDADriverError, RuntimeError):
            continue
        if best is None or ms < best[1]:
            best = (choice, ms)
    return best

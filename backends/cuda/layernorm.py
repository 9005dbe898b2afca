"""Layer and RMS normalization over rows of up to 4096 elements on CUDA devices, one row to a few lanes of a warp.

The op's row kernel reduces through shared memory with a barrier per step, and reads each row three times: over
ConvNeXt-T's (16, 56, 56) rows of 96 float16 elements it took 0.11 ms where the bytes need under 0.01. Here each
row belongs to ``L`` adjacent lanes of a warp (a power of two: a row of 96 float16 elements to 4 lanes, 768 to 32),
which load it once into registers in vectors of ``V`` elements (16 bytes where the row's length allows), reduce
its sum and then its squared deviations through warp shuffles, and write the normalized row with its scale and
bias, computing in float32. Mean and inverse standard deviation are written too where the op asks for them.

A row length and dtype compile once per process (CuPy keeps the binary on disk). Calls this kernel does not take
(other dtypes, longer rows, a scale or bias that differs between rows, a stash type other than float32) run the
op's kernels.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import vector_kernels
from .backend import _address, _Vendor

#: element types the kernel takes
DTYPES = vector_kernels.DTYPES
#: the longest rows
MAX_K = 4096
#: vectors each lane aims to hold (rows short enough get fewer lanes)
PER_LANE = 4
#: threads of a block
BLOCK = 256

_SOURCE = r"""
extern "C" __global__ void __launch_bounds__(BLOCK) devicelayer_row_norm(
    const T* __restrict__ x, const T* __restrict__ scale, const T* __restrict__ bias, T* __restrict__ y,
    float* __restrict__ mean_out, float* __restrict__ inv_out, long long rows, float eps)
{
    const long long t = (long long)blockIdx.x * BLOCK + threadIdx.x;
    const long long r = t / L;
    const int lane = (int)(t % L);
    const bool live = r < rows;  // (every lane of a warp takes part in the shuffles)
    const T* row = x + (live ? r : 0) * (long long)K;
    float h[NV][V];
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
        const int k = (i * L + lane) * V;
        if (live && k < K) {
            const vec_t v = *(const vec_t*)(row + k);
#pragma unroll
            for (int e = 0; e < V; ++e) { h[i][e] = (float)v.v[e]; sum += h[i][e]; }
        } else {
#pragma unroll
            for (int e = 0; e < V; ++e) h[i][e] = 0.f;
        }
    }
#pragma unroll
    for (int s = L / 2; s > 0; s /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, s, L);
    const float mean = CENTER ? sum / (float)K : 0.f;
    float spread = 0.f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
        const int k = (i * L + lane) * V;
        if (k < K) {
#pragma unroll
            for (int e = 0; e < V; ++e) { const float d = h[i][e] - mean; spread += d * d; }
        }
    }
#pragma unroll
    for (int s = L / 2; s > 0; s /= 2) spread += __shfl_xor_sync(0xffffffffu, spread, s, L);
    const float inv = 1.f / sqrtf(spread / (float)K + eps);
    if (!live) return;
    T* out = y + r * (long long)K;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
        const int k = (i * L + lane) * V;
        if (k < K) {
            vec_t o;
            vec_t g, b;
            if (HAS_SCALE) g = *(const vec_t*)(scale + k);
            if (HAS_BIAS) b = *(const vec_t*)(bias + k);
#pragma unroll
            for (int e = 0; e < V; ++e) {
                float v = (h[i][e] - mean) * inv;
                if (HAS_SCALE) v *= (float)g.v[e];
                if (HAS_BIAS) v += (float)b.v[e];
                o.v[e] = (T)v;
            }
            *(vec_t*)(out + k) = o;
        }
    }
    if (STATS && lane == 0) { mean_out[r] = mean; inv_out[r] = inv; }
}
"""

def shape_of(ins: Any, attrs: dict) -> tuple[int, int] | None:
    """(rows, row length) of a call this kernel takes, None where it takes none."""
    x = ins[0]
    axis = attrs["axis"]
    k = math.prod(x.shape[axis:])
    if x.dtype not in DTYPES or not 0 < k <= MAX_K or x.size >= 2**40:
        return None
    for p in ins[1:]:
        full = (1,) * (len(x.shape) - len(p.shape)) + tuple(p.shape)
        if p.dtype != x.dtype or any(d != 1 for d in full[:axis]) or full[axis:] != tuple(x.shape[axis:]):
            return None  # (a scale or bias broadcast within the row, or differing between rows)
    return x.size // k, k


def form(k: int, dtype: np.dtype, aligned: bool) -> tuple[int, int, int]:
    """(V, L, NV): elements per vector, lanes per row, vectors per lane for rows of ``k`` elements."""
    v = next(v for v in (16 // dtype.itemsize, 4, 2, 1) if k % v == 0 and (aligned or v == 1))
    vectors = k // v
    lanes = 1
    while lanes < 32 and lanes * PER_LANE < vectors:
        lanes *= 2
    return v, lanes, -(-vectors // lanes)


class RowNorm(_Vendor):
    """``layer_normalization`` and ``rms_normalization`` over rows of up to ``MAX_K`` float16, bfloat16 or
    float32 elements (see the module)."""

    def accepts(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Rows this kernel takes, statistics (where asked for) in float32."""
        stats = len(outs) > 1
        return shape_of(ins, attrs) is not None and (not stats or outs[1].dtype == np.float32)

    def enqueue(self, stream: Any, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any) -> None:
        """Queue the normalization on ``stream`` (the device is current)."""
        rows, k = shape_of(ins, attrs)
        if not rows:
            return
        addresses = [_address(b) for b in (*in_bufs, out_bufs[0])]
        dtype = ins[0].dtype
        aligned = all(a % 16 == 0 for a in addresses)
        v, lanes, nv = form(k, dtype, aligned)
        center = self.name == "layer_normalization"
        stats = len(outs) > 1
        x, y = addresses[0], addresses[-1]
        scale = addresses[1] if len(ins) > 1 else x
        bias = addresses[2] if len(ins) > 2 else x
        mean, inv = ((_address(out_bufs[1]), _address(out_bufs[2])) if stats else (y, y))
        kernel = vector_kernels.compiled(_SOURCE, "devicelayer_row_norm", dtype, v, L=lanes, NV=nv, K=k, BLOCK=BLOCK,
                                         CENTER=int(center), HAS_SCALE=int(len(ins) > 1),
                                         HAS_BIAS=int(len(ins) > 2), STATS=int(stats))
        total = rows * lanes
        with stream:
            kernel((-(-total // BLOCK),), (BLOCK,),
                   (np.uint64(x), np.uint64(scale), np.uint64(bias), np.uint64(y), np.uint64(mean), np.uint64(inv),
                    np.int64(rows), np.float32(attrs["epsilon"])))

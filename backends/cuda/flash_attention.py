"""Scaled dot-product attention on tensor cores (sm_80 and later), flash-attention style: float16 and bfloat16, and
float32 to about float32's precision.

The op's blocked kernel computes scores and weighted values with float32 multiply-adds: GPT-2's four heads of 64
over 128 tokens at batch 16 took 0.047 ms a layer in float16 on the H200. Here a block of four warps takes 64 query
rows of one head, 16 a warp. A warp holds its queries as ``mma.sync.m16n8k16`` fragments; for each block of 64 keys
(keys and values staged in shared memory, 16 bytes a load) it computes its 16 x 64 scores on the tensor cores, adds
the scale, the mask and the causal and window limits, folds them into the rows' running maxima and sums (online
softmax, float32), and multiplies the probabilities, rounded to the input's type in the registers that hold them,
by the values on the tensor cores again, accumulating in float32. Nothing of the score matrix reaches memory.

float32 takes the same steps with ``mma.sync.m16n8k8`` in TF32, each operand split into two TF32 parts (the nearest
TF32 and the nearest to what it leaves: 22 of float32's 24 bits) and each product made of three (big x big, big x
small, small x big), as PyTorch's float32 attention does: TF32's own 11 bits round to about 5e-4, where float32's
tolerance is 2e-5. Keys and values are split once as they are staged (32 or 16 keys a block: ``keys_per_block``);
the probabilities are fed in the order their scores lie in the registers, the values' rows read to match. Whisper's
encoder at batch 16 (six heads of 64 over 500 frames) took 0.647 ms a layer through the blocked kernel on the H200,
where PyTorch's took 0.202.

It takes the op's calls in float16, bfloat16 or float32 (q, k and v of one type) with one head size for keys and
values, a multiple of 16 up to 128 (of 8 in float32), at least 16 query rows, every layout (``sequence_major``,
``packed_heads``), grouped key heads, a bool mask or one of the inputs' type, ``is_causal``, ``offset``, the windows
and ``nan_rows``; the op's kernels run the rest (softcap, a second output, transposed keys, ``nonpad_kv_seqlen``,
other dtypes). On the H200, GPT-2's layer above: 0.016 ms.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from devicelayer.kernels.op import get

from . import vector_kernels
from .backend import _address, _Vendor
from .blas import BFLOAT16, HALVES

#: query rows a block takes (16 a warp)
BLOCK_M = 64
#: keys a block stages at a time
BLOCK_N = 64
#: the largest head size
MAX_D = 128
#: the fewest query rows (fewer go to the op's decoding kernel)
MIN_ROWS = 16
FLOAT32 = np.dtype(np.float32)
#: static shared memory a block may use
SHARED_BYTES = 48 * 1024


def keys_per_block(d: int) -> int:
    """Keys a float32 block stages at a time: as many of 32 and 16 as the static shared memory holds (keys and
    values, two TF32 parts each, rows of ``d + 4`` words)."""
    return 32 if 16 * 32 * (d + 4) <= SHARED_BYTES else 16


_SOURCE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#define WARPS (BM / 16)
#define NEG_INF (__int_as_float(0xff800000))
#define KP (D + (F32 ? 4 : 8))
#if F32
typedef float T;
#define TO_T(v) (v)
#elif BF16
typedef __nv_bfloat16 T;
typedef __nv_bfloat162 T2;
#define PACK2(lo, hi) __floats2bfloat162_rn(lo, hi)
#define JOIN2(lo, hi) __halves2bfloat162(lo, hi)
#define TO_T(v) __float2bfloat16(v)
#define MMA_TYPE "bf16"
#else
typedef __half T;
typedef __half2 T2;
#define PACK2(lo, hi) __floats2half2_rn(lo, hi)
#define JOIN2(lo, hi) __halves2half2(lo, hi)
#define TO_T(v) __float2half(v)
#define MMA_TYPE "f16"
#endif

#if F32
__device__ __forceinline__ unsigned tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

// x as two TF32 parts: big, the nearest TF32, and small, the nearest TF32 to what big leaves
__device__ __forceinline__ void split(float x, unsigned& big, unsigned& small) {
    big = tf32(x);
    small = tf32(x - __uint_as_float(big));
}

__device__ __forceinline__ void mma8(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += a * b to about float32's precision: big*small, small*big and big*big, the small products first (small*small,
// below float32's last bit, is left out)
__device__ __forceinline__ void mma3(float* c, const unsigned* ab, const unsigned* as, unsigned bb0, unsigned bb1,
                                     unsigned bs0, unsigned bs1) {
    mma8(c, as, bb0, bb1);
    mma8(c, ab, bs0, bs1);
    mma8(c, ab, bb0, bb1);
}
#else

__device__ __forceinline__ unsigned pack(float lo, float hi) {
    T2 h = PACK2(lo, hi);
    return *reinterpret_cast<unsigned*>(&h);
}

__device__ __forceinline__ unsigned pair(const T* p) {  // two neighbouring elements as one register
#if ALIGNED
    return *reinterpret_cast<const unsigned*>(p);
#else
    T2 h = JOIN2(p[0], p[1]);
    return *reinterpret_cast<unsigned*>(&h);
#endif
}

__device__ __forceinline__ unsigned gather2(const T* lo, const T* hi) {
    T2 h = JOIN2(*lo, *hi);
    return *reinterpret_cast<unsigned*>(&h);
}

__device__ __forceinline__ void mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." MMA_TYPE "." MMA_TYPE ".f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#endif

extern "C" __global__ void __launch_bounds__(BM * 2) devicelayer_flash_attention(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const MASK_T* __restrict__ mask,
    T* __restrict__ y, int Hq, int G, int Sq, int jlimit,
    long long qb, long long qh, long long qs, long long kb, long long kh, long long ks,
    long long vb, long long vh, long long vs, long long yb, long long yh, long long ys,
    long long mb, long long mh, long long mq, int offset, int left, int right, float scale)
{
#if F32
    // keys and values as their two TF32 parts each (``split``)
    __shared__ __align__(16) unsigned Kb[BN * KP], Ksm[BN * KP], Vb[BN * KP], Vsm[BN * KP];
#else
    __shared__ __align__(16) T Ks[BN * KP];
    __shared__ __align__(16) T Vs[BN * KP];
#endif
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z, hk = h / G;
    const T* qp = q + b * qb + h * qh;
    const T* kp = k + b * kb + hk * kh;
    const T* vp = v + b * vb + hk * vh;
    const int r0 = tile * BM + warp * 16 + g, r1 = r0 + 8;
#if F32
    // the m16n8k8 A fragment: rows g and g + 8, columns t and t + 4 of each 8
    unsigned qbig[D / 8][4], qsml[D / 8][4];
#pragma unroll
    for (int kk = 0; kk < D / 8; ++kk) {
        const int c = kk * 8 + t;
        split(r0 < Sq ? qp[r0 * qs + c] : 0.f, qbig[kk][0], qsml[kk][0]);
        split(r1 < Sq ? qp[r1 * qs + c] : 0.f, qbig[kk][1], qsml[kk][1]);
        split(r0 < Sq ? qp[r0 * qs + c + 4] : 0.f, qbig[kk][2], qsml[kk][2]);
        split(r1 < Sq ? qp[r1 * qs + c + 4] : 0.f, qbig[kk][3], qsml[kk][3]);
    }
#else
    unsigned qf[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const int c = kk * 16 + 2 * t;
        qf[kk][0] = r0 < Sq ? pair(qp + r0 * qs + c) : 0u;
        qf[kk][1] = r1 < Sq ? pair(qp + r1 * qs + c) : 0u;
        qf[kk][2] = r0 < Sq ? pair(qp + r0 * qs + c + 8) : 0u;
        qf[kk][3] = r1 < Sq ? pair(qp + r1 * qs + c + 8) : 0u;
    }
#endif
    float o[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.f, l1 = 0.f;
    const int last = tile * BM + BM - 1 + offset;  // the tile's last row, shifted
    int jend = jlimit;
    if (CAUSAL && last + 1 < jend) jend = last + 1;
    if (right >= 0 && last + right + 1 < jend) jend = last + right + 1;
    for (int j0 = 0; j0 < jend; j0 += BN) {
        __syncthreads();
#if F32
        for (int e = threadIdx.x; e < BN * (D / 4); e += BM * 2) {
            const int row = e / (D / 4), col = (e % (D / 4)) * 4;
            const int j = j0 + row;
            float kx[4] = {0.f, 0.f, 0.f, 0.f}, vx[4] = {0.f, 0.f, 0.f, 0.f};
            if (j < jend) {
#if ALIGNED
                const float4 kv = *reinterpret_cast<const float4*>(kp + j * ks + col);
                const float4 vv = *reinterpret_cast<const float4*>(vp + j * vs + col);
                kx[0] = kv.x; kx[1] = kv.y; kx[2] = kv.z; kx[3] = kv.w;
                vx[0] = vv.x; vx[1] = vv.y; vx[2] = vv.z; vx[3] = vv.w;
#else
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    kx[u] = kp[j * ks + col + u];
                    vx[u] = vp[j * vs + col + u];
                }
#endif
            }
            uint4 k1, k2, v1, v2;
            split(kx[0], k1.x, k2.x); split(kx[1], k1.y, k2.y); split(kx[2], k1.z, k2.z); split(kx[3], k1.w, k2.w);
            split(vx[0], v1.x, v2.x); split(vx[1], v1.y, v2.y); split(vx[2], v1.z, v2.z); split(vx[3], v1.w, v2.w);
            *reinterpret_cast<uint4*>(&Kb[row * KP + col]) = k1;
            *reinterpret_cast<uint4*>(&Ksm[row * KP + col]) = k2;
            *reinterpret_cast<uint4*>(&Vb[row * KP + col]) = v1;
            *reinterpret_cast<uint4*>(&Vsm[row * KP + col]) = v2;
        }
#else
        for (int e = threadIdx.x; e < BN * (D / 8); e += BM * 2) {
            const int row = e / (D / 8), col = (e % (D / 8)) * 8;
            const int j = j0 + row;
#if ALIGNED
            uint4 kv = make_uint4(0u, 0u, 0u, 0u), vv = kv;
            if (j < jend) {
                kv = *reinterpret_cast<const uint4*>(kp + j * ks + col);
                vv = *reinterpret_cast<const uint4*>(vp + j * vs + col);
            }
            *reinterpret_cast<uint4*>(&Ks[row * KP + col]) = kv;
            *reinterpret_cast<uint4*>(&Vs[row * KP + col]) = vv;
#else
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                Ks[row * KP + col + u] = j < jend ? kp[j * ks + col + u] : TO_T(0.f);
                Vs[row * KP + col + u] = j < jend ? vp[j * vs + col + u] : TO_T(0.f);
            }
#endif
        }
#endif
        __syncthreads();
        float s[BN / 8][4];
#pragma unroll
        for (int n = 0; n < BN / 8; ++n) {
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#if F32
            // the B fragment: key g of the 8, columns t and t + 4 of each 8
            const int at = (n * 8 + g) * KP + t;
#pragma unroll
            for (int kk = 0; kk < D / 8; ++kk)
                mma3(s[n], qbig[kk], qsml[kk], Kb[at + kk * 8], Kb[at + kk * 8 + 4], Ksm[at + kk * 8],
                     Ksm[at + kk * 8 + 4]);
#else
            const T* kr = &Ks[(n * 8 + g) * KP + 2 * t];
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk)
                mma(s[n], qf[kk], *reinterpret_cast<const unsigned*>(kr + kk * 16),
                    *reinterpret_cast<const unsigned*>(kr + kk * 16 + 8));
#endif
        }
        float x0 = NEG_INF, x1 = NEG_INF;
#pragma unroll
        for (int n = 0; n < BN / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int row = e < 2 ? r0 : r1;
                const int j = j0 + n * 8 + 2 * t + (e & 1);
                float val = s[n][e] * scale;
                bool dead = j >= jend || (CAUSAL && j > row + offset) || (left >= 0 && row + offset - j > left)
                            || (right >= 0 && j - row - offset > right);
#if HAS_MASK
                if (!dead && row < Sq) {
                    const MASK_T mv = mask[b * mb + h * mh + row * mq + j];
#if MASK_BOOL
                    dead = !mv;
#else
                    val += (float)mv;
#endif
                }
#endif
                val = dead ? NEG_INF : val;
                s[n][e] = val;
                if (e < 2) x0 = fmaxf(x0, val); else x1 = fmaxf(x1, val);
            }
        }
        x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 1));
        x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 2));
        x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 1));
        x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 2));
        const float n0 = fmaxf(m0, x0), n1 = fmaxf(m1, x1);
        const float base0 = n0 == NEG_INF ? 0.f : n0, base1 = n1 == NEG_INF ? 0.f : n1;
        const float c0 = m0 == NEG_INF ? 0.f : __expf(m0 - base0);
        const float c1 = m1 == NEG_INF ? 0.f : __expf(m1 - base1);
        m0 = n0;
        m1 = n1;
        l0 *= c0;
        l1 *= c1;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) { o[n][0] *= c0; o[n][1] *= c0; o[n][2] *= c1; o[n][3] *= c1; }
#pragma unroll
        for (int n = 0; n < BN / 8; ++n) {
            s[n][0] = __expf(s[n][0] - base0);
            s[n][1] = __expf(s[n][1] - base0);
            s[n][2] = __expf(s[n][2] - base1);
            s[n][3] = __expf(s[n][3] - base1);
            l0 += s[n][0] + s[n][1];
            l1 += s[n][2] + s[n][3];
        }
#if F32
        // The probabilities are the A fragment as they lie: a thread holds keys 2t and 2t + 1 of each 8 (the scores'
        // C fragment), taken as the fragment's columns t and t + 4; the values' B fragment reads rows 2t and
        // 2t + 1 to match (the sum over keys does not depend on their order).
#pragma unroll
        for (int n = 0; n < BN / 8; ++n) {
            unsigned pb[4], psm[4];
            split(s[n][0], pb[0], psm[0]);
            split(s[n][2], pb[1], psm[1]);
            split(s[n][1], pb[2], psm[2]);
            split(s[n][3], pb[3], psm[3]);
            const int at = (n * 8 + 2 * t) * KP + g;
#pragma unroll
            for (int c = 0; c < D / 8; ++c)
                mma3(o[c], pb, psm, Vb[at + c * 8], Vb[at + KP + c * 8], Vsm[at + c * 8], Vsm[at + KP + c * 8]);
        }
#else
#pragma unroll
        for (int kq = 0; kq < BN / 16; ++kq) {
            const unsigned a[4] = {pack(s[2 * kq][0], s[2 * kq][1]), pack(s[2 * kq][2], s[2 * kq][3]),
                                   pack(s[2 * kq + 1][0], s[2 * kq + 1][1]), pack(s[2 * kq + 1][2], s[2 * kq + 1][3])};
            const T* vr = &Vs[(kq * 16 + 2 * t) * KP + g];
#pragma unroll
            for (int n = 0; n < D / 8; ++n) {
                const T* vc = vr + n * 8;
                mma(o[n], a, gather2(vc, vc + KP), gather2(vc + 8 * KP, vc + 9 * KP));
            }
        }
#endif
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float empty = NAN_ROWS ? __int_as_float(0x7fc00000) : 0.f;
    const float i0 = l0 == 0.f ? empty : 1.f / l0, i1 = l1 == 0.f ? empty : 1.f / l1;
    T* yp = y + b * yb + h * yh;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
        const int c = n * 8 + 2 * t;
        if (r0 < Sq) {
            yp[r0 * ys + c] = TO_T(o[n][0] * i0);
            yp[r0 * ys + c + 1] = TO_T(o[n][1] * i0);
        }
        if (r1 < Sq) {
            yp[r1 * ys + c] = TO_T(o[n][2] * i1);
            yp[r1 * ys + c + 1] = TO_T(o[n][3] * i1);
        }
    }
}
"""

def _strides(shape: tuple, sequence_major: bool) -> tuple[int, int, int]:
    """(batch, head, sequence) strides in elements of a dense (B, H, S, D), or (B, S, H, D) where sequence-major."""
    if sequence_major:
        _, s, h, d = shape
        return s * h * d, d, h * d
    _, h, s, d = shape
    return h * s * d, s * d, d


def _capability(dev: Any) -> int:
    found = re.search(r"sm_(\d+)", dev.info.api_version)
    return int(found.group(1)) if found else 0


class FlashAttention(_Vendor):
    """``attention`` in float16, bfloat16 or float32 on tensor cores (see the module)."""

    def accepts(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """The op's calls this kernel computes as the op defines them."""
        if _capability(self.dev) < 80 or len(outs) != 1 or attrs.get("qk_matmul_output_mode", -1) != -1:
            return False
        if attrs.get("softcap", 0.0) or attrs.get("k_transposed"):
            return False
        dtype = ins[0].dtype
        if dtype not in (*HALVES, FLOAT32) or any(t.dtype != dtype for t in ins[1:3]):
            return False
        extra = ins[3:]
        if len(extra) > 1 or any(t.dtype not in (dtype, np.dtype(np.bool_)) for t in extra):
            return False  # (nonpad_kv_seqlen)
        q, _, v = get("attention").heads_major(ins, attrs)[:3]
        B, hq, sq, d = q.shape
        step = 8 if dtype == FLOAT32 else 16  # (the k of one m16n8k8 or m16n8k16 product)
        return (d == v.shape[3] and d % step == 0 and step <= d <= MAX_D and sq >= MIN_ROWS and B <= 65535
                and hq <= 65535 and all(t.size < 2**31 for t in (*ins, *outs)))

    def enqueue(self, stream: Any, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any) -> None:
        """Queue the attention on ``stream`` (the device is current)."""
        major = attrs.get("sequence_major", (0, 0, 0, 0))
        op = get("attention")
        q, k, _ = op.heads_major(ins, attrs)[:3]
        B, hq, sq, d = q.shape
        hk, skv = k.shape[1], k.shape[2]
        if not (B and hq and sq):
            return
        packed = op.packed(attrs) is not None
        size = q.dtype.itemsize
        # (q's, k's and v's first elements: their heads' places in a packed row)
        addresses = [_address(buf) + first * d * size for buf, first in zip(in_bufs[:3], op.first_heads(attrs))]
        addresses.append(_address(out_bufs[0]))
        aligned = all(a % 16 == 0 for a in addresses)
        mask = ins[3] if len(ins) > 3 else None
        mb = mh = mq = 0
        jlimit = skv
        if mask is not None:
            mb, mh, mq = op.mask_strides(mask)
            jlimit = min(skv, mask.shape[-1])
        f32 = q.dtype == FLOAT32
        kernel = vector_kernels.kernel(
            _SOURCE, "devicelayer_flash_attention", D=d, BM=BLOCK_M, BN=keys_per_block(d) if f32 else BLOCK_N,
            F32=int(f32), ALIGNED=int(aligned),
            CAUSAL=int(bool(attrs["is_causal"])), HAS_MASK=int(mask is not None),
            MASK_BOOL=int(mask is not None and mask.dtype == np.bool_),
            MASK_T="unsigned char" if mask is not None and mask.dtype == np.bool_ else vector_kernels.DTYPES[q.dtype],
            BF16=int(q.dtype == BFLOAT16),
            NAN_ROWS=int(bool(attrs.get("nan_rows"))))
        row = (hq + 2 * hk) * d
        strides = [(sq * row, d, row)] * 3 if packed else \
            [_strides(t.shape, bool(f)) for t, f in zip(ins[:3], major[:3])]
        strides.append(_strides(outs[0].shape, bool(major[3])))
        mask_address = _address(in_bufs[3]) if mask is not None else addresses[0]
        args = [np.uint64(a) for a in (*addresses[:3], mask_address, addresses[3])]
        args += [np.int32(hq), np.int32(hq // hk), np.int32(sq), np.int32(jlimit)]
        args += [np.int64(s) for trio in strides for s in trio]
        args += [np.int64(mb), np.int64(mh), np.int64(mq), np.int32(attrs["offset"]),
                 np.int32(attrs["left_window_size"]), np.int32(attrs["right_window_size"]),
                 np.float32(attrs["scale"])]
        with stream:
            kernel((-(-sq // BLOCK_M), hq, B), (BLOCK_M * 2,), tuple(args))

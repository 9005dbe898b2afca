
typedef long i64;
typedef ulong u64;
typedef short i16;
typedef ushort u16;
#define GID(d) ((int)get_global_id(d))
#define LID(d) ((int)get_local_id(d))
#define GROUP(d) ((int)get_group_id(d))
#define LSIZE(d) ((int)get_local_size(d))
#define NGROUPS(d) ((int)get_num_groups(d))
#define BARRIER() barrier(CLK_LOCAL_MEM_FENCE)
#define FOR_EACH(i, n) for (int i = GID(0); i < (n); i += NGROUPS(0) * LSIZE(0))
#define CAST(t, v) ((t)(v))
#define DL_INF INFINITY
#define DL_NAN NAN
#define dl_max(a, b) (((a) > (b) || isnan(a)) ? (a) : (b))
#define dl_min(a, b) (((a) < (b) || isnan(a)) ? (a) : (b))
#define dl_isnan(x) isnan(x)
#define dl_rsqrt(x) rsqrt(x)
#define dl_abs(x) fabs(x)
#define dl_pow(x, y) pow(x, y)
#define dl_erf(x) erf(x)
#define dl_round(x) rint(x)
#define dl_div(a, b) ((a) / (b))  /* IEEE: built with -cl-fp32-correctly-rounded-divide-sqrt where offered */
#define dl_fmod(x, y) fmod(x, y)
#define dl_isinf(x) isinf(x)
#define dl_sign(x) (((x) > 0 ? 1 : ((x) < 0 ? -1 : 0)) + (x) * 0)  /* x * 0 keeps the type and a NaN */
#define dl_exp(x) exp(x)
#define dl_log(x) log(x)
#define dl_sqrt(x) sqrt(x)
#define dl_tanh(x) tanh(x)
#define dl_floor(x) floor(x)
#define dl_ceil(x) ceil(x)
#define dl_sin(x) sin(x)
#define dl_cos(x) cos(x)
#define dl_tan(x) tan(x)
#define dl_asin(x) asin(x)
#define dl_acos(x) acos(x)
#define dl_atan(x) atan(x)
#define dl_sinh(x) sinh(x)
#define dl_cosh(x) cosh(x)
#define dl_asinh(x) asinh(x)
#define dl_acosh(x) acosh(x)
#define dl_atanh(x) atanh(x)
#define dl_trunc(x) trunc(x)
typedef float T;
typedef float ACC;
#define TO_ACC(v) ((ACC)(v))
#define FROM_ACC(v) ((T)(v))
#define TM 4
#define TN 4
#define BM 64
#define BN 64
#define BK 16
#define KD 1
#define KH 3
#define KW 3
#define SD 1
#define SH 1
#define SW 1
#define PD 0
#define PH 1
#define PW 1
#define DD 1
#define DH 1
#define DW 1
#define TRANSPOSED 0
#define HAS_BIAS 1
#define INTEGER 0
#define EPILOGUE 1
__kernel void conv_tiled4_float_bias_epe1dc40c0f37f_1_3_3_1_1_1_0_1_1_1_1_1(__global const float* restrict x, __global const float* restrict w, __global const float* restrict bias, __global const float* restrict dl_e1, __global float* restrict y, const int NB, const int Cg, const int Mg, const int G, const int ID, const int IH, const int IW, const int OD, const int OH, const int OW) {
    __local float sa[1040];
    __local float sb[1040];
// Convolution (and transposed convolution) as an implicit GEMM, tiled like gemm_tiled.dlk.
//
// Per group g: rows are the group's output channels m (Mg of them), columns the
// output positions of every image (NB * OD*OH*OW), K the group's input channels
// times the kernel window (Cg * KD*KH*KW).  The B tile is gathered straight from
// the input: each column's output position is decoded once per tile, each K
// index into (channel, kd, kh, kw); padding and out-of-range taps read as 0.
//   x: (NB, G*Cg, ID, IH, IW)    y: (NB, G*Mg, OD, OH, OW)
//   w: (G*Mg, Cg, KD, KH, KW)    or, TRANSPOSED, (G*Cg, Mg, KD, KH, KW)
// Forward:    input index = out * S - P + k * D
// TRANSPOSED: input index = (out + P - k * D) / S, where that divides exactly.
// 1-D and 2-D convolutions are 3-D ones with leading extents of 1.
// Defines: TM, TN (micro-tile; BM = 16 TM, BN = 16 TN), BM, BN, BK, KD, KH, KW, SD, SH, SW, PD, PH, PW, DD, DH, DW,
// TRANSPOSED, HAS_BIAS, INTEGER (y, int32, = conv(x - xz[0], w - wz[channel * WZS]) (+ int32 bias)
// accumulated exactly in int; the zero-point buffers xz, wz follow w; the shared tiles are int; not TRANSPOSED).
// EPILOGUE (where defined, the line DL_EPILOGUE is replaced by the op's epilogue, kernels/ops/epilogue.py: it
// stores the chain's value of dl_x0, the biased result, to y[dl_at]; its buffers come before y, its scalars last).
#if INTEGER
#define TACC int
#define LOAD_W(v, m) (CAST(int, v) - CAST(int, wz[(m) * WZS]))
#define LOAD_X(v) (CAST(int, v) - CAST(int, xz[0]))
#else
#define TACC ACC
#define LOAD_W(v, m) TO_ACC(v)
#define LOAD_X(v) TO_ACC(v)
#endif
    const int lid = LID(0);
    const int tx = lid % 16;
    const int ty = lid / 16;
    const int KS = KD * KH * KW;
    const int Kc = Cg * KS;
    const int P = OD * OH * OW;
    const int NP = NB * P;
    const int ISP = ID * IH * IW;
    const int tiles_n = (NP + BN - 1) / BN;
    const int tiles_m = (Mg + BM - 1) / BM;
    const int per_group = tiles_m * tiles_n;
    const int ntiles = per_group * G;
    const int bn = lid % BN;  // this work item's column in every B tile it loads
    for (int tile = GROUP(0); tile < ntiles; tile += NGROUPS(0)) {
        const int g = tile / per_group;
        const int rest = tile - g * per_group;
        const int m0 = (rest / tiles_n) * BM;
        const int n0 = (rest - (rest / tiles_n) * tiles_n) * BN;
        // decode this work item's B column once per tile
        const int col = n0 + bn;
        const bool col_ok = col < NP;
        const int img = col_ok ? col / P : 0;
        const int p = col_ok ? col - img * P : 0;
        const int od = p / (OH * OW);
        const int pr = p - od * (OH * OW);
        const int oh = pr / OW;
        const int ow = pr - oh * OW;
        const int xbase = (img * G + g) * Cg * ISP;
        TACC acc[TM * TN];
        for (int i = 0; i < TM * TN; ++i) {
            acc[i] = CAST(TACC, 0);
        }
        for (int k0 = 0; k0 < Kc; k0 += BK) {
            for (int l = 0; l < TM; ++l) {
                const int idx = lid + 256 * l;
                // A: weights, K index fastest
                const int ak = idx % BK;
                const int am = idx / BK;
                const int gm = m0 + am;
                const int gka = k0 + ak;
                TACC va = CAST(TACC, 0);
                if (gm < Mg && gka < Kc) {
#if TRANSPOSED
                    const int wc = gka / KS;
                    va = LOAD_W(w[((g * Cg + wc) * Mg + gm) * KS + (gka - wc * KS)], g * Mg + gm);
#else
                    va = LOAD_W(w[(g * Mg + gm) * Kc + gka], g * Mg + gm);
#endif
                }
                sa[ak * (BM + 1) + am] = va;
            }
            for (int l = 0; l < TN; ++l) {
                const int idx = lid + 256 * l;
                // B: input patches, column fastest
                const int bk = idx / BN;
                const int gkb = k0 + bk;
                TACC vb = CAST(TACC, 0);
                if (col_ok && gkb < Kc) {
                    const int c = gkb / KS;
                    const int kp = gkb - c * KS;
                    const int kd = kp / (KH * KW);
                    const int kr = kp - kd * (KH * KW);
                    const int kh = kr / KW;
                    const int kw = kr - kh * KW;
#if TRANSPOSED
                    const int td = od + PD - kd * DD;
                    const int th = oh + PH - kh * DH;
                    const int tw = ow + PW - kw * DW;
                    if (td >= 0 && th >= 0 && tw >= 0 && td % SD == 0 && th % SH == 0 && tw % SW == 0) {
                        const int id = td / SD;
                        const int ih = th / SH;
                        const int iw = tw / SW;
                        if (id < ID && ih < IH && iw < IW) {
                            vb = LOAD_X(x[xbase + c * ISP + (id * IH + ih) * IW + iw]);
                        }
                    }
#else
                    const int id = od * SD - PD + kd * DD;
                    const int ih = oh * SH - PH + kh * DH;
                    const int iw = ow * SW - PW + kw * DW;
                    if (id >= 0 && id < ID && ih >= 0 && ih < IH && iw >= 0 && iw < IW) {
                        vb = LOAD_X(x[xbase + c * ISP + (id * IH + ih) * IW + iw]);
                    }
#endif
                }
                sb[bk * (BN + 1) + bn] = vb;
            }
            BARRIER();
            for (int kk = 0; kk < BK; ++kk) {
                TACC av[TM];
                TACC bv[TN];
                for (int i = 0; i < TM; ++i) {
                    av[i] = sa[kk * (BM + 1) + ty + 16 * i];
                }
                for (int j = 0; j < TN; ++j) {
                    bv[j] = sb[kk * (BN + 1) + tx + 16 * j];
                }
                for (int i = 0; i < TM; ++i) {
                    for (int j = 0; j < TN; ++j) {
                        acc[i * TN + j] += av[i] * bv[j];
                    }
                }
            }
            BARRIER();
        }
        for (int j = 0; j < TN; ++j) {
            const int oc = n0 + tx + 16 * j;
            if (oc < NP) {
                const int oimg = oc / P;
                const int op = oc - oimg * P;
                for (int i = 0; i < TM; ++i) {
                    const int gm = m0 + ty + 16 * i;
                    if (gm < Mg) {
#if INTEGER
                        int v = acc[i * TN + j];
#if HAS_BIAS
                        v += bias[g * Mg + gm];
#endif
                        y[((oimg * G + g) * Mg + gm) * P + op] = v;
#else
                        ACC v = acc[i * TN + j];
#if HAS_BIAS
                        v += TO_ACC(bias[g * Mg + gm]);
#endif
#ifdef EPILOGUE
                        int dl_at = ((oimg * G + g) * Mg + gm) * P + op;
                        T dl_x0 = FROM_ACC(v);
        float dl_x1 = dl_e1[dl_at];
        float dl_v0;
        {
#undef T
#define T float
#undef ACC
#define ACC float
#undef TO_ACC
#define TO_ACC(v) CAST(ACC, v)
#undef FROM_ACC
#define FROM_ACC(v) CAST(T, v)
        ACC va = TO_ACC(dl_x0);
        ACC vb = TO_ACC(dl_x1);
        dl_v0 = FROM_ACC((va + vb));
        }
        float dl_v1;
        {
#undef T
#define T float
#undef ACC
#define ACC float
#undef TO_ACC
#define TO_ACC(v) CAST(ACC, v)
#undef FROM_ACC
#define FROM_ACC(v) CAST(T, v)
        ACC v = TO_ACC(dl_v0);
        dl_v1 = FROM_ACC((v / (CAST(ACC, 1.0f) + dl_exp(-CAST(ACC, (1.0f)) * v))));
        }
        y[dl_at] = dl_v1;
#else
                        y[((oimg * G + g) * Mg + gm) * P + op] = FROM_ACC(v);
#endif
#endif
                    }
                }
            }
        }
    }

}

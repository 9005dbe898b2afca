"""Renderers: a KernelSpec in the dialect becomes CUDA C, OpenCL C or GLSL compute source.

Each renderer is chosen by ``DeviceInfo.kernel_language``; a language adds
its prelude (types, index macros, math) and a signature generated from the
spec's parameters.
"""

from __future__ import annotations

from typing import Callable

from .dialect import TYPES, WORD, KernelSpec, Param

#: one-argument math functions every language has under the C name, for float and double
_FLOAT_MATH = ("exp", "log", "sqrt", "tanh", "floor", "ceil", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
               "cosh", "asinh", "acosh", "atanh", "trunc")
#: dialect functions GLSL has no double form of (GLSL 4.50 defines its transcendental functions for float only)
_GLSL_FLOAT_ONLY = frozenset({"dl_sin", "dl_cos", "dl_tan", "dl_asin", "dl_acos", "dl_atan", "dl_sinh", "dl_cosh",
                              "dl_asinh", "dl_acosh", "dl_atanh", "dl_erf"})


#: kernel languages with a bfloat16 type: there bfloat16 runs the float16 kernels (storage, float arithmetic)
BFLOAT16_LANGUAGES = frozenset({"cuda-c"})

#: kernel languages with the dialect's matrix-unit macros, which a kernel defining MMA as 1 uses: MMA_A, MMA_B
#: (16 x 16 float16 fragments of A and B, loaded row-major from shared memory: MMA_LOAD_A/B(fragment,
#: array, first element, row stride)), MMA_C (a 16 x 16 float accumulator: MMA_ZERO, MMA_FMA(c, a, b) for c += a b,
#: MMA_STORE_C(array, first element, row stride, c), row-major), MMA_WARP, MMA_LANE (the subgroup's index in the
#: group and the work item's in the subgroup), and MMA_WORDS, MMA_HALF(word, e) (a 16-byte word of a view,
#: ``KernelSpec.views``, and its float16 element e, 0 to 7)
MMA_LANGUAGES = frozenset({"glsl"})

#: kernel languages whose WIDE_LOAD and WIDE_STORE move N neighbouring elements as one access (16 bytes at most)
#: where the address is aligned and all N lie before n; every language has the macros (elsewhere one element at a
#: time): WIDE_LOAD(type, N, array, first, n, w) declares w holding array[first..first+N) (past n: the last
#: element again), WIDE(w, u) is its element u, WIDE_DECL(type, N, w) declares one to fill, WIDE_STORE(type, N,
#: array, first, n, w) writes those before n
WIDE_LANGUAGES = frozenset({"cuda-c"})
#: the wide-access macros of the other languages: one element at a time
_ONE_AT_A_TIME = r"""#define WIDE(w, u) (w[u])
#define WIDE_DECL(TY, N, w) TY w[N];
#define WIDE_LOAD(TY, N, arr, i0, n, w) TY w[N]; for (int dl_k = 0; dl_k < (N); ++dl_k) w[dl_k] = arr[(i0) + dl_k < (n) ? (i0) + dl_k : (n) - 1];
#define WIDE_STORE(TY, N, arr, i0, n, w) for (int dl_k = 0; dl_k < (N); ++dl_k) if ((i0) + dl_k < (n)) arr[(i0) + dl_k] = w[dl_k];"""


def _acc(elem: str) -> str:
    return "f64" if elem == "f64" else "float"


def _defines(spec: KernelSpec) -> str:
    return "".join(f"#define {k} {v}\n" for k, v in spec.defines)


def _c_shared(spec: KernelSpec, type_name: str) -> str:
    """A shared array's element type in CUDA C and OpenCL C."""
    return "uint4" if type_name == WORD else spec.resolve(type_name)


def _c_params(spec: KernelSpec, space: str, restrict: str) -> list[str]:
    """C parameter declarations: buffers as (const) pointers in ``space``, scalars by value."""
    params = []
    for p in spec.params:
        t = spec.resolve(p.type)
        if p.is_buffer:
            params.append(f"{space}{'const ' if p.access == 'in' else ''}{t}* {restrict} {p.name}")
        else:
            params.append(f"const {t} {p.name}")
    return params


# -- CUDA C (NVRTC) ---------------------------------------------------------------------
_CUDA_PRELUDE = r"""
typedef unsigned int uint;
typedef long long i64;
typedef unsigned long long u64;
typedef double f64;
typedef unsigned char uchar;
typedef short i16;
typedef unsigned short u16;
__device__ __forceinline__ int dl_dim(const uint3 v, int d) { return d == 0 ? (int)v.x : d == 1 ? (int)v.y : (int)v.z; }
__device__ __forceinline__ int dl_dim(const dim3 v, int d) { return d == 0 ? (int)v.x : d == 1 ? (int)v.y : (int)v.z; }
#define LID(d) dl_dim(threadIdx, d)
#define GROUP(d) dl_dim(blockIdx, d)
#define LSIZE(d) dl_dim(blockDim, d)
#define NGROUPS(d) dl_dim(gridDim, d)
#define GID(d) (GROUP(d) * LSIZE(d) + LID(d))
#define BARRIER() __syncthreads()
#define FOR_EACH(i, n) for (int i = GID(0); i < (n); i += NGROUPS(0) * LSIZE(0))
#define UNROLL _Pragma("unroll")
#define CAST(t, v) ((t)(v))
#define VEC4 float4
#define LDS4(arr, i) (*(const float4*)(&(arr)[i]))
template <typename DL_T, int DL_N> struct alignas(sizeof(DL_T) * DL_N) dl_wide { DL_T v[DL_N]; };
#define WIDE(w, u) ((w).v[u])
#define WIDE_DECL(TY, N, w) dl_wide<TY, N> w;
#define WIDE_AT(arr, i0, n, N, w) ((i0) + (N) <= (n) && ((unsigned long long)(const void*)((arr) + (i0))) % sizeof(w) == 0)
#define WIDE_LOAD(TY, N, arr, i0, n, w) dl_wide<TY, N> w; if (WIDE_AT(arr, i0, n, N, w)) w = *(const dl_wide<TY, N>*)((arr) + (i0)); else { for (int dl_k = 0; dl_k < (N); ++dl_k) w.v[dl_k] = (arr)[(i0) + dl_k < (n) ? (i0) + dl_k : (n) - 1]; }
#define WIDE_STORE(TY, N, arr, i0, n, w) if (WIDE_AT(arr, i0, n, N, w)) *(dl_wide<TY, N>*)((arr) + (i0)) = w; else { for (int dl_k = 0; dl_k < (N); ++dl_k) if ((i0) + dl_k < (n)) (arr)[(i0) + dl_k] = w.v[dl_k]; }
#define DL_INF __int_as_float(0x7f800000)
#define DL_NAN __int_as_float(0x7fc00000)
__device__ __forceinline__ float dl_max(float a, float b) { return (a > b || a != a) ? a : b; }
__device__ __forceinline__ float dl_min(float a, float b) { return (a < b || a != a) ? a : b; }
__device__ __forceinline__ double dl_max(double a, double b) { return (a > b || a != a) ? a : b; }
__device__ __forceinline__ double dl_min(double a, double b) { return (a < b || a != a) ? a : b; }
__device__ __forceinline__ float dl_rsqrt(float x) { return rsqrtf(x); }
__device__ __forceinline__ double dl_rsqrt(double x) { return rsqrt(x); }
__device__ __forceinline__ float dl_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double dl_abs(double x) { return fabs(x); }
__device__ __forceinline__ bool dl_isnan(float x) { return x != x; }
__device__ __forceinline__ bool dl_isnan(double x) { return x != x; }
__device__ __forceinline__ float dl_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double dl_pow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ float dl_erf(float x) { return erff(x); }
__device__ __forceinline__ double dl_erf(double x) { return erf(x); }
__device__ __forceinline__ float dl_div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double dl_div(double a, double b) { return a / b; }
__device__ __forceinline__ float dl_round(float x) { return rintf(x); }
__device__ __forceinline__ double dl_round(double x) { return rint(x); }
__device__ __forceinline__ float dl_fmod(float x, float y) { return fmodf(x, y); }
__device__ __forceinline__ double dl_fmod(double x, double y) { return fmod(x, y); }
__device__ __forceinline__ bool dl_isinf(float x) { return isinf(x); }
__device__ __forceinline__ bool dl_isinf(double x) { return isinf(x); }
__device__ __forceinline__ float dl_sign(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x); }
__device__ __forceinline__ double dl_sign(double x) { return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : x); }
""" + "".join(
    f"__device__ __forceinline__ float dl_{f}(float x) {{ return {f}f(x); }}\n"
    f"__device__ __forceinline__ double dl_{f}(double x) {{ return {f}(x); }}\n" for f in _FLOAT_MATH)


def render_cuda(spec: KernelSpec) -> str:
    """CUDA C for NVRTC: ``extern "C" __global__`` with the spec's parameters."""
    used = spec.dtypes_used()
    head = ["#include <cuda_fp16.h>\ntypedef __half f16;\n" if "float16" in used else "",
            "#include <cuda_bf16.h>\ntypedef __nv_bfloat16 bf16;\n" if "bfloat16" in used else "", _CUDA_PRELUDE]
    elem = spec.elem
    head.append(f"typedef {elem} T;\ntypedef {_acc(elem)} ACC;\n")
    if elem == "f16":
        head.append("#define TO_ACC(v) __half2float(v)\n#define FROM_ACC(v) __float2half(v)\n")
    elif elem == "bf16":
        head.append("#define TO_ACC(v) __bfloat162float(v)\n#define FROM_ACC(v) __float2bfloat16_rn(v)\n")
    else:
        head.append("#define TO_ACC(v) ((ACC)(v))\n#define FROM_ACC(v) ((T)(v))\n")
    head.append(_defines(spec))
    params = _c_params(spec, "", "__restrict__")
    shared = "".join(f"    __shared__ __align__(16) {_c_shared(spec, t)} {n}[{c}];\n" for t, n, c in spec.shared)
    views = "".join(f"    const uint4* __restrict__ {n}_v4 = (const uint4*)(const void*){n};\n" for n in spec.views)
    return ("".join(head) + f'extern "C" __global__ void {spec.name}({", ".join(params)}) {{\n'
            + shared + views + spec.body + "\n}\n")


# -- OpenCL C -----------------------------------------------------------------------------
_OPENCL_PRELUDE = r"""
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
#define UNROLL _Pragma("unroll")
#define CAST(t, v) ((t)(v))
#define VEC4 float4
#define LDS4(arr, i) (*(const __local float4*)(&(arr)[i]))
""" + _ONE_AT_A_TIME + r"""
#define DL_INF INFINITY
#define DL_NAN NAN
#define dl_max(a, b) (((a) > (b) || (a) != (a)) ? (a) : (b))
#define dl_min(a, b) (((a) < (b) || (a) != (a)) ? (a) : (b))
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
""" + "".join(f"#define dl_{f}(x) {f}(x)\n" for f in _FLOAT_MATH)


def render_opencl(spec: KernelSpec) -> str:
    """OpenCL C: a ``__kernel`` with ``__global`` buffers and by-value scalars."""
    used = spec.dtypes_used()
    head = []
    if "float16" in used:
        head.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable\ntypedef half f16;\n")
    if "float64" in used:
        head.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable\ntypedef double f64;\n")
    head.append(_OPENCL_PRELUDE)
    elem = spec.elem
    head.append(f"typedef {elem} T;\ntypedef {_acc(elem)} ACC;\n")
    head.append("#define TO_ACC(v) ((ACC)(v))\n#define FROM_ACC(v) ((T)(v))\n")
    head.append(_defines(spec))
    params = _c_params(spec, "__global ", "restrict")
    shared = "".join(f"    __local {_c_shared(spec, t)} {n}[{c}] __attribute__((aligned(16)));\n"
                     for t, n, c in spec.shared)
    views = "".join(f"    __global const uint4* {n}_v4 = (__global const uint4*){n};\n" for n in spec.views)
    return ("".join(head) + f"__kernel void {spec.name}({', '.join(params)}) {{\n" + shared + views + spec.body
            + "\n}\n")


# -- GLSL compute (Vulkan) -----------------------------------------------------------------
_GLSL_TYPES = {"float": "float", "f16": "float16_t", "f64": "double", "int": "int", "uint": "uint",
               "i64": "int64_t", "u64": "uint64_t", "char": "int8_t", "uchar": "uint8_t", "i16": "int16_t",
               "u16": "uint16_t"}

_GLSL_PRELUDE = r"""
#define GID(d) int(gl_GlobalInvocationID[d])
#define LID(d) int(gl_LocalInvocationID[d])
#define GROUP(d) int(gl_WorkGroupID[d])
#define LSIZE(d) int(gl_WorkGroupSize[d])
#define NGROUPS(d) int(gl_NumWorkGroups[d])
#define BARRIER() { memoryBarrierShared(); barrier(); }
#define FOR_EACH(i, n) for (int i = GID(0); i < (n); i += NGROUPS(0) * LSIZE(0))
#define UNROLL [[unroll]]
#define CAST(t, v) t(v)
#define VEC4 vec4
#define LDS4(arr, i) vec4((arr)[i], (arr)[(i) + 1], (arr)[(i) + 2], (arr)[(i) + 3])
""" + _ONE_AT_A_TIME + r"""
#define DL_INF uintBitsToFloat(0x7F800000u)
#define DL_NAN uintBitsToFloat(0x7FC00000u)
float dl_max(float a, float b) { return (a > b || isnan(a)) ? a : b; }
float dl_min(float a, float b) { return (a < b || isnan(a)) ? a : b; }
bool dl_isnan(float x) { return isnan(x); }
bool dl_isinf(float x) { return isinf(x); }
float dl_rsqrt(float x) { return inversesqrt(x); }
float dl_abs(float x) { return abs(x); }
float dl_sqrt(float x) { return sqrt(x); }
float dl_floor(float x) { return floor(x); }
float dl_ceil(float x) { return ceil(x); }
float dl_trunc(float x) { return trunc(x); }
float dl_round(float x) { return roundEven(x); }
DL_DIV_FLOAT
float dl_sign(float x) { return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : x); }
float dl_fmod(float x, float y) {
    // C's fmod: x - y * trunc(x / y), the product subtracted in one rounding; a quotient rounded up to the next
    // integer is stepped back; a finite x modulo an infinite y is x
    if (isinf(y) && !isinf(x)) return x;
    float r = fma(-y, trunc(x / y), x);
    return (r != 0.0 && (r < 0.0) != (x < 0.0)) ? r + abs(y) * sign(x) : r;
}
""" + "".join(f"float dl_{f}(float x) {{ return {f}(x); }}\n" for f in
              ("exp", "log", "sin", "cos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh")) + r"""
float dl_tan(float x) {
    // Cody-Waite reduction by pi/2 in three parts and Cephes' tanf polynomial: GLSL's tan is sin / cos with
    // absolute errors, relative errors of 1e-2 near the poles on some drivers; |x| > 1e4 keeps the builtin
    if (!(abs(x) < 1e4)) return tan(x);
    float k = roundEven(x * 0.636619772367581343);
    precise float r = ((x - k * 1.5703125) - k * 4.837512969970703125e-4) - k * 7.54978995489188216e-8;
    float z = r * r;
    float t = r + r * z * (((((9.38540185543e-3 * z + 3.11992232697e-3) * z + 2.44301354525e-2) * z
                              + 5.34112807005e-2) * z + 1.33387994085e-1) * z + 3.33331568548e-1);
    return mod(k, 2.0) != 0.0 ? dl_div(-1.0, t) : t;
}
// asin and acos through atan: some drivers' own are accurate to 4e-4 only
float dl_asin(float x) { return atan(x, sqrt((1.0 - x) * (1.0 + x))); }
float dl_acos(float x) { return atan(sqrt((1.0 - x) * (1.0 + x)), x); }
float dl_tanh(float x) {
    // tanh through exp of a clamped argument: some drivers return NaN for large |x|
    float c = clamp(x, -15.0, 15.0);
    float e = exp(2.0 * c);
    return (e - 1.0) / (e + 1.0);
}
float dl_pow(float x, float y) {
    // GLSL's pow is undefined for x < 0; C's pow is defined for integral y
    if (x < 0.0 && y == floor(y)) {
        float r = pow(-x, y);
        return mod(y, 2.0) == 1.0 ? -r : r;
    }
    if (x == 0.0) return y == 0.0 ? 1.0 : (y > 0.0 ? 0.0 : DL_INF);
    return pow(x, y);
}
float dl_erf(float x) {
    // |x| < 0.5: the Maclaurin series (relative error < 1e-9, where 1 - erfc would lose the digits);
    // else erf through erfc's Chebyshev fit (Numerical Recipes erfcc), |error| < 1.2e-7
    float z = abs(x);
    if (z < 0.5) {
        float s = x * x;
        return x * (1.1283791671 + s * (-0.3761263890 + s * (0.1128379167 + s * (-0.0268661706 +
               s * (0.0052239776 + s * (-0.0008548327 + s * 0.0001205533))))));
    }
    float t = 1.0 / (1.0 + 0.5 * z);
    float r = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
              t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 +
              t * (-0.82215223 + t * 0.17087277)))))))));
    return x >= 0.0 ? 1.0 - r : r - 1.0;
}
"""


_GLSL_F64 = r"""
double dl_max(double a, double b) { return (a > b || isnan(a)) ? a : b; }
double dl_min(double a, double b) { return (a < b || isnan(a)) ? a : b; }
bool dl_isnan(double x) { return isnan(x); }
bool dl_isinf(double x) { return isinf(x); }
double dl_rsqrt(double x) { return inversesqrt(x); }
double dl_abs(double x) { return abs(x); }
double dl_sqrt(double x) { return sqrt(x); }
double dl_floor(double x) { return floor(x); }
double dl_ceil(double x) { return ceil(x); }
double dl_trunc(double x) { return trunc(x); }
double dl_div(double a, double b) { return a / b; }
double dl_round(double x) {
    // half to even by hand: some drivers' roundEven of a double rounds halves toward zero
    if (abs(x) >= 4503599627370496.0) return x;
    double r = floor(x + 0.5);
    return (r - x == 0.5 && mod(r, 2.0) != 0.0) ? r - 1.0 : r;
}
double dl_sign(double x) { return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : x); }
// exp, log, tanh and pow, which GLSL defines for float only, to double precision (relative error ~1e-16; pow's
// grows with |y log x|): exp by Cody-Waite reduction to |r| <= ln2/2 and a degree-13 Taylor polynomial, log by
// frexp and the atanh series, tanh through expm1 near 0
double dl_exp(double x) {
    if (isnan(x)) return x;
    if (x > 709.782712893384lf) return double(DL_INF);
    if (x < -745.2lf) return 0.0lf;
    double k = floor(x * 1.4426950408889634lf + 0.5lf);
    double r = (x - k * 6.93147180369123816490e-01lf) - k * 1.90821492927058770002e-10lf;
    double p = 1.0lf / 6227020800.0lf;
    p = p * r + 1.0lf / 479001600.0lf;
    p = p * r + 1.0lf / 39916800.0lf;
    p = p * r + 1.0lf / 3628800.0lf;
    p = p * r + 1.0lf / 362880.0lf;
    p = p * r + 1.0lf / 40320.0lf;
    p = p * r + 1.0lf / 5040.0lf;
    p = p * r + 1.0lf / 720.0lf;
    p = p * r + 1.0lf / 120.0lf;
    p = p * r + 1.0lf / 24.0lf;
    p = p * r + 1.0lf / 6.0lf;
    p = p * r + 0.5lf;
    p = p * r + 1.0lf;
    p = p * r + 1.0lf;
    return ldexp(p, int(k));
}
double dl_log(double x) {
    if (isnan(x) || x < 0.0lf) return double(DL_NAN);
    if (x == 0.0lf) return -double(DL_INF);
    if (isinf(x)) return x;
    int sub = 0;
    if (x < 2.2250738585072014e-308lf) { x = x * 18014398509481984.0lf; sub = 54; }  // subnormal: times 2^54
    int e;
    double m = frexp(x, e);
    e = e - sub;
    if (m < 0.70710678118654752lf) { m = m * 2.0lf; e = e - 1; }
    double s = (m - 1.0lf) / (m + 1.0lf);
    double s2 = s * s;
    double t = 1.0lf / 21.0lf;
    t = t * s2 + 1.0lf / 19.0lf;
    t = t * s2 + 1.0lf / 17.0lf;
    t = t * s2 + 1.0lf / 15.0lf;
    t = t * s2 + 1.0lf / 13.0lf;
    t = t * s2 + 1.0lf / 11.0lf;
    t = t * s2 + 1.0lf / 9.0lf;
    t = t * s2 + 1.0lf / 7.0lf;
    t = t * s2 + 1.0lf / 5.0lf;
    t = t * s2 + 1.0lf / 3.0lf;
    double de = double(e);
    return de * 6.93147180369123816490e-01lf + (de * 1.90821492927058770002e-10lf + 2.0lf * s + 2.0lf * s * s2 * t);
}
double dl_tanh(double x) {
    if (isnan(x)) return x;
    double a = abs(x);
    double t;
    if (a < 0.625lf) {  // expm1(2a) by its Taylor series (to degree 20), no cancellation
        double y = 2.0lf * a;
        double q = 1.0lf;
        for (int n = 20; n >= 2; n--) q = 1.0lf + q * y / double(n);
        double e = y * q;
        t = e / (e + 2.0lf);
    } else {
        t = a > 20.0lf ? 1.0lf : 1.0lf - 2.0lf / (dl_exp(2.0lf * a) + 1.0lf);
    }
    return x < 0.0lf ? -t : t;
}
double dl_pow(double x, double y) {
    if (x < 0.0lf && y == floor(y)) {
        double r = dl_exp(y * dl_log(-x));
        return mod(y, 2.0lf) == 1.0lf ? -r : r;
    }
    if (x == 0.0lf) return y == 0.0lf ? 1.0lf : (y > 0.0lf ? 0.0lf : double(DL_INF));
    if (y == 0.0lf) return 1.0lf;
    return dl_exp(y * dl_log(x));
}
double dl_fmod(double x, double y) {
    if (isinf(y) && !isinf(x)) return x;
    double r = fma(-y, trunc(x / y), x);
    return (r != 0.0 && (r < 0.0) != (x < 0.0)) ? r + abs(y) * sign(x) : r;
}
"""


def lacks(code: str, language: str, elem: str) -> str | None:
    """Why ``code`` (a body or expression using dialect math) cannot be rendered for element type ``elem`` in
    ``language``; None when it can.  GLSL defines its transcendental functions for float only."""
    if language == "glsl" and _acc(elem) == "f64":
        missing = sorted(f for f in _GLSL_FLOAT_ONLY if f + "(" in code)
        if missing:
            return f"GLSL has no float64 {', '.join(m[3:] for m in missing)}"
    return None


#: float division rounded as IEEE, GLSL's own ``/`` being allowed 2.5 ulp: through double where the device has it
#: (the float64 quotient of two floats, rounded to float, is the nearest float but in vanishingly rare cases),
#: else one correction step with the remainder made exact by Dekker's product (precise: neither contracted nor
#: reassociated)
_GLSL_DIV_F64 = """float dl_div(float a, float b) { return float(double(a) / double(b)); }"""
_GLSL_DIV_F32 = """float dl_div(float a, float b) {
    precise float q = a / b;
    precise float p = q * b;
    if (isinf(q) || isnan(q) || b == 0.0 || !(abs(p) > 1e-25 && abs(p) < 1e30 && abs(q) < 1e30 && abs(b) < 1e30 &&
                                               abs(q) > 1e-25 && abs(b) > 1e-25)) return q;
    precise float cq = 4097.0 * q;
    precise float qh = cq - (cq - q);
    precise float ql = q - qh;
    precise float cb = 4097.0 * b;
    precise float bh = cb - (cb - b);
    precise float bl = b - bh;
    precise float e = ((qh * bh - p) + qh * bl + ql * bh) + ql * bl;
    precise float r = (a - p) - e;
    return q + r / b;
}"""


#: the matrix-unit macros in GLSL, through GL_NV_cooperative_matrix (the form glslang 11 compiles)
_GLSL_MMA_EXTENSIONS = ("#extension GL_NV_cooperative_matrix : require\n"
                        "#extension GL_KHR_memory_scope_semantics : require\n"
                        "#extension GL_KHR_shader_subgroup_basic : require\n")
_GLSL_MMA = r"""
#define MMA_A fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define MMA_B fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define MMA_C fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define MMA_ZERO(c) c = MMA_C(0.0)
#define MMA_LOAD_A(f, arr, at, ld) coopMatLoadNV(f, arr, uint(at), uint(ld), false)
#define MMA_LOAD_B(f, arr, at, ld) coopMatLoadNV(f, arr, uint(at), uint(ld), false)
#define MMA_FMA(c, a, b) c = coopMatMulAddNV(a, b, c)
#define MMA_STORE_C(arr, at, ld, c) coopMatStoreNV(c, arr, uint(at), uint(ld), false)
#define MMA_WARP int(gl_SubgroupID)
#define MMA_LANE int(gl_SubgroupInvocationID)
#define MMA_WORDS uvec4
#define MMA_HALF(w, e) unpackFloat2x16((w)[(e) / 2])[(e) % 2]
"""


def _uses_mma(spec: KernelSpec) -> bool:
    return bool(dict(spec.defines).get("MMA"))


def render_glsl(spec: KernelSpec, float64: bool = False) -> str:
    """GLSL 450 compute: buffers as std430 bindings in order, scalars as push constants in order (``float64``:
    the device computes in double, which float division uses)."""
    used = spec.dtypes_used()
    head = ["#version 450\n", f"#pragma kernel {spec.name}\n",
            "#extension GL_EXT_control_flow_attributes : enable\n"]  # (UNROLL's [[unroll]])
    if "float16" in used:
        head.append("#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n"
                    "#extension GL_EXT_shader_16bit_storage : require\n")
    if used & {"int64", "uint64"}:
        head.append("#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require\n")
    if used & {"int8", "uint8"}:
        head.append("#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require\n"
                    "#extension GL_EXT_shader_8bit_storage : require\n")
    if used & {"int16", "uint16"}:
        head.append("#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require\n")
        if "float16" not in used:
            head.append("#extension GL_EXT_shader_16bit_storage : require\n")
    if _uses_mma(spec):
        head.append(_GLSL_MMA_EXTENSIONS)
    head.append("layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;\n")
    for name, glsl in _GLSL_TYPES.items():
        if name not in ("float", "int", "uint"):
            head.append(f"#define {name} {glsl}\n")
    elem = spec.elem
    head.append(f"#define T {_GLSL_TYPES[elem]}\n#define ACC {_GLSL_TYPES[_acc(elem)]}\n")
    head.append("#define TO_ACC(v) ACC(v)\n#define FROM_ACC(v) T(v)\n")
    head.append(_GLSL_PRELUDE.replace("DL_DIV_FLOAT", _GLSL_DIV_F64 if float64 else _GLSL_DIV_F32))
    if "float64" in used:
        head.append(_GLSL_F64)
    if _uses_mma(spec):
        head.append(_GLSL_MMA)
    head.append(_defines(spec))
    binding = 0
    for p in spec.params:
        if p.is_buffer:
            qual = {"in": "readonly ", "out": "writeonly ", "inout": ""}[p.access]
            head.append(f"layout(std430, binding = {binding}) {qual}buffer DL_{p.name} "
                        f"{{ {_GLSL_TYPES[spec.resolve(p.type)]} {p.name}[]; }};\n")
            if p.name in spec.views:  # (a second block on the same binding)
                head.append(f"layout(std430, binding = {binding}) readonly buffer DL_{p.name}_v4 "
                            f"{{ uvec4 {p.name}_v4[]; }};\n")
            binding += 1
    scalars = [p for p in spec.params if not p.is_buffer]
    copies = ""
    if scalars:
        members = " ".join(f"{_GLSL_TYPES[spec.resolve(p.type)]} {p.name};" for p in scalars)
        head.append(f"layout(push_constant) uniform DL_PushConstants {{ {members} }} dl_pc;\n")
        copies = "".join(f"    const {_GLSL_TYPES[spec.resolve(p.type)]} {p.name} = dl_pc.{p.name};\n"
                         for p in scalars)
    for t, n, c in spec.shared:
        head.append(f"shared {'uvec4' if t == WORD else _GLSL_TYPES[spec.resolve(t)]} {n}[{c}];\n")
    return "".join(head) + "void main() {\n" + copies + spec.body + "\n}\n"


RENDERERS: dict[str, Callable[[KernelSpec], str]] = {
    "cuda-c": render_cuda,
    "opencl-c": render_opencl,
    "glsl": render_glsl,
}


def render(spec: KernelSpec, language: str, float64: bool = False) -> str:
    """Source of ``spec`` in ``language`` (a ``DeviceInfo.kernel_language``); ``float64``: the device has it."""
    try:
        renderer = RENDERERS[language]
    except KeyError:
        raise ValueError(f"no renderer for kernel language {language!r}") from None
    return render_glsl(spec, float64) if renderer is render_glsl else renderer(spec)


__all__ = ["Param", "KernelSpec", "render", "lacks", "RENDERERS", "TYPES", "MMA_LANGUAGES", "WIDE_LANGUAGES"]

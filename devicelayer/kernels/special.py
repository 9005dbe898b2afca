"""Special functions in vectorised NumPy for the host (NumPy has no ``erf``).

``erf`` follows W. J. Cody's rational Chebyshev approximations ("Rational
Chebyshev approximations for the error function", Math. Comp. 23, 1969; the
CALERF routine of SPECFUN, also behind SciPy's and glibc's forms): three
intervals of |x|, each a ratio of polynomials, accurate to about 1e-16
relative in float64.  Lower-precision inputs are computed in float64.
"""

from __future__ import annotations

import numpy as np

# |x| <= 0.46875: erf(x) = x * P(x^2) / Q(x^2)
_A = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02, 3.20937758913846947e03,
      1.85777706184603153e-1)
_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03, 2.84423683343917062e03)
# 0.46875 < |x| <= 4: erfc(|x|) = exp(-x^2) * P(|x|) / Q(|x|)
_C = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01, 2.98635138197400131e02,
      8.81952221241769090e02, 1.71204761263407058e03, 2.05107837782607147e03, 1.23033935479799725e03,
      2.15311535474403846e-8)
_D = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02, 1.62138957456669019e03,
      3.29079923573345963e03, 4.36261909014324716e03, 3.43936767414372164e03, 1.23033935480374942e03)
# |x| > 4: erfc(|x|) = exp(-x^2) / |x| * (1/sqrt(pi) + P(1/x^2) / (x^2 Q(1/x^2)))
_P = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1, 1.60837851487422766e-2,
      6.58749161529837803e-4, 1.63153871373020978e-2)
_Q = (2.56852019228982242e00, 1.87295284992346047e00, 5.27905102951428412e-1, 6.05183413124413191e-2,
      2.33520497626869185e-3)
_RSQRTPI = 5.6418958354775628695e-1
_THRESH = 0.46875
#: from here on erfc(|x|) < 2e-17 and erf(x) rounds to +-1 in float64
_ONE_FROM = 6.0
#: elements per block: the temporaries of a block stay in the cache
_BLOCK = 65536


def _ratio(y: np.ndarray, num: tuple[float, ...], den: tuple[float, ...], out: np.ndarray,
           tmp: np.ndarray) -> np.ndarray:
    """Cody's nested form (((n[-1] y + n[0]) y + n[1]) y ...) / ((y + d[0]) y + d[1]) ..., into ``out`` (``tmp``:
    scratch of y's shape)."""
    k = len(den)
    np.multiply(y, num[-1], out=out)
    np.copyto(tmp, y)
    for i in range(k - 1):
        out += num[i]
        out *= y
        tmp += den[i]
        tmp *= y
    out += num[k - 1]
    tmp += den[k - 1]
    out /= tmp
    return out


def _erf_block(x: np.ndarray, out: np.ndarray) -> None:
    """erf of the float64 block ``x`` into ``out`` (any float dtype, same length).  Both of the main intervals'
    forms are evaluated on the whole block and the right one picked (cheaper than gathering the elements of
    each); the tails past |x| = 4 are gathered, being rare."""
    y = np.abs(x)
    ysq = x * x
    a, b = np.empty_like(x), np.empty_like(x)
    small = _ratio(ysq, _A, _B, a, b)  # |x| <= 0.46875: x * P(x^2) / Q(x^2)
    small *= x
    # 0.46875 < |x| <= 4: erfc(|x|) = exp(-x^2) * R(|x|); the rounding of x^2 in exp costs erf at most ~0.2 ulp
    # (erfc(|x|) * x^2 < 0.2)
    mid = _ratio(y, _C, _D, b, np.empty_like(x))
    np.negative(ysq, out=ysq)
    np.exp(ysq, out=ysq)
    mid *= ysq
    np.subtract(1.0, mid, out=mid)
    np.copysign(mid, x, out=mid)
    np.copyto(mid, small, where=y <= _THRESH)  # NaN stays NaN through the mid form
    tail = y > 4.0
    if tail.any():
        yt, xt = y[tail], x[tail]
        z = 1.0 / (yt * yt)
        erfc = np.exp(-yt * yt) * (_RSQRTPI - z * _ratio(z, _P, _Q, np.empty_like(z), np.empty_like(z))) / yt
        mid[tail] = np.where(yt < _ONE_FROM, np.copysign(1.0 - erfc, xt), np.copysign(1.0, xt))
    out[...] = mid


# float32: erf(x) = x P(x^2) / Q(x^2) on x clamped to [-4, 4] (past 4, erf rounds to +-1 in float32), the minimax
# form of Eigen's ``generic_fast_erf_float``: within 8 ulp of the float64 form above for every float32 x
_P32 = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
        -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_Q32 = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
        -1.42647390514189e-02)
_BLOCK32 = 32768


def _erf32_block(x: np.ndarray, out: np.ndarray, t1: np.ndarray, t2: np.ndarray) -> None:
    """erf of the float32 block ``x`` into float32 ``out`` (``t1``, ``t2``: float32 scratch of x's length)."""
    xc = np.clip(x, -4.0, 4.0, out=t1)
    x2 = np.multiply(xc, xc, out=t2)
    num = np.multiply(x2, np.float32(_P32[0]), out=out)
    num += np.float32(_P32[1])
    for c in _P32[2:]:
        num *= x2
        num += np.float32(c)
    num *= xc
    den = np.multiply(x2, np.float32(_Q32[0]), out=t1)  # (xc is no longer needed)
    den += np.float32(_Q32[1])
    for c in _Q32[2:]:
        den *= x2
        den += np.float32(c)
    num /= den


def erf(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The error function of every element of ``x`` (a float array), in ``x``'s dtype (or into ``out``), in
    cache-sized blocks spread over the host's threads (``parallel``): float64 (and wider) in float64 by Cody's
    forms, narrower floats in float32 by a rational form accurate to a few float32 ulp."""
    from .op import parallel

    x = np.asarray(x)
    if out is None:
        out = np.empty(x.shape, x.dtype)
    flat_x, flat_out = x.reshape(-1), out.reshape(-1)
    single = x.dtype.kind == "f" and x.dtype.itemsize <= 4
    block = _BLOCK32 if single else _BLOCK
    blocks = -(-flat_x.size // block)

    def piece(a: int, b: int) -> None:
        with np.errstate(all="ignore"):
            if single:  # (scratch of the size in use: a small tensor's call allocates little)
                t1, t2, y = (np.empty(min(block, flat_x.size), np.float32) for _ in range(3))
            for k in range(a, b):
                part = slice(k * block, (k + 1) * block)
                if single:
                    src, dst = flat_x[part], flat_out[part]
                    n = len(src)
                    into = dst if dst.dtype == np.float32 else y[:n]
                    _erf32_block(src.astype(np.float32, copy=False), into, t1[:n], t2[:n])
                    if into is not dst:
                        dst[...] = into
                else:
                    _erf_block(flat_x[part].astype(np.float64), flat_out[part])
    parallel(piece, blocks, flat_x.size * (8 if single else 16))
    return out

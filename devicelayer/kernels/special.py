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
#: beyond this |x|, erfc(|x|) underflows and erf(x) is +-1 in float64
_XBIG = 26.543


def _ratio(y: np.ndarray, num: tuple[float, ...], den: tuple[float, ...]) -> np.ndarray:
    """Cody's nested form: (((n[-1] y + n[0]) y + n[1]) y ...) / ((y + d[0]) y + d[1]) ... ."""
    k = len(den)
    xnum = num[-1] * y
    xden = y.copy()
    for i in range(k - 1):
        xnum += num[i]
        xnum *= y
        xden += den[i]
        xden *= y
    return (xnum + num[k - 1]) / (xden + den[k - 1])


def _exp_neg_square(y: np.ndarray) -> np.ndarray:
    """exp(-y^2) with y^2 split as (y rounded to 1/16)^2 + the rest, so the large part is exact (Cody)."""
    ysq = np.trunc(y * 16.0) / 16.0
    return np.exp(-ysq * ysq) * np.exp(-(y - ysq) * (y + ysq))


def _erf64(x: np.ndarray) -> np.ndarray:
    y = np.abs(x)
    out = np.empty_like(x)
    small = y <= _THRESH
    if small.any():
        xs = x[small]
        out[small] = xs * _ratio(xs * xs, _A, _B)
    mid = (y > _THRESH) & (y <= 4.0)
    if mid.any():
        ym = y[mid]
        erfc = _exp_neg_square(ym) * _ratio(ym, _C, _D)
        out[mid] = np.copysign((0.5 - erfc) + 0.5, x[mid])
    big = (y > 4.0) & (y < _XBIG)
    if big.any():
        yb = y[big]
        z = 1.0 / (yb * yb)
        erfc = _exp_neg_square(yb) * (_RSQRTPI - z * _ratio(z, _P, _Q)) / yb
        out[big] = np.copysign((0.5 - erfc) + 0.5, x[big])
    huge = y >= _XBIG
    if huge.any():
        out[huge] = np.copysign(1.0, x[huge])
    nan = np.isnan(x)
    if nan.any():
        out[nan] = x[nan]
    return out


def erf(x: np.ndarray) -> np.ndarray:
    """The error function of every element of ``x`` (a float array), in ``x``'s dtype; computed in float64."""
    x = np.asarray(x)
    wide = x.astype(np.float64, copy=False)
    with np.errstate(all="ignore"):
        return _erf64(wide.reshape(-1)).reshape(x.shape).astype(x.dtype, copy=False)

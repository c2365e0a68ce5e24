"""Vectorisable float32 transcendentals, built from arith ops.

In: an f32 :class:`~tilec.codegen.cpu.scalar.Num` at the current insertion point.  Out: the
function's value as straight-line arith/math ops (no calls, no branches: every special case is
a ``select``), so that LLVM's loop vectorizer keeps the loop around them vectorised.  LLVM
would lower ``math.exp`` & co. to one libm call per element, which stops vectorisation.

Each function stays within a few float32 ulp of the exact result over the whole float32 range
(inf and NaN as NumPy has them); ``test_cpu_mathlib.py`` measures the errors:

- ``exp``: Cody-Waite reduction by ln 2, Cephes degree-7 polynomial, scaling by two powers of
  two so that subnormal results are rounded once.
- ``log``: exponent/mantissa split (subnormals rescaled first), Cephes polynomial.
- ``tanh``: Cephes odd polynomial for |x| < 0.625, else ``1 - 2 / (exp(2|x|) + 1)``.
- ``sigmoid``: ``1 / (1 + e)`` or ``e / (1 + e)`` with ``e = exp(-|x|)``: never overflows.
- ``erf``: ``x + x * P(x^2)`` for |x| < 1, ``1 - exp(-x^2) * Q(|x|)`` up to 4, then +-1
  (least-squares fits to erf made for tilec; max error about 8e-8 absolute).
- ``sin``/``cos``: x * 2/pi modulo 4 in float64, with 2/pi in pieces whose products with a
  float32 are exact (so any float32 reduces accurately), Cephes polynomials on [-pi/4, pi/4].
- ``pow``: ``exp(b * log|a|)`` with NumPy's signs and special cases.
"""
from __future__ import annotations

import math

from ..common.scalar import (Num, bitcast, const, f32, f64, fabs, floor, horner, i32, logical_not,
                     multiply_add, round_even, select, to_float, to_int)

# Cody-Waite split of ln 2: the first part has 9 significant bits, so n * LN2_HI is exact.
LN2_HI = 0.693359375
LN2_LO = -2.12194440e-4
EXP_POLY = [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
            1.6666665459e-1, 5.0000001201e-1]
EXP_MAX = 88.8     # exp overflows above 88.72
EXP_MIN = -104.0   # exp underflows to zero below -103.97

LOG_POLY = [7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
            1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
            3.3333331174e-1]
FLT_MIN = 1.17549435e-38
SQRT_HALF = 0.707106781186547524

TANH_POLY = [-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
             -3.33332819422e-1]
TANH_SMALL = 0.625

# erf(x) = x + x * ERF_SMALL(x^2) for |x| < 1;
# erf(x) = 1 - exp(-x^2) * ERF_LARGE((|x| - 2.5) / 1.5) for 1 <= |x| < 4; +-1 beyond.
ERF_SMALL = [7.933493883522702e-05, -0.000803484664911161, 0.005191218377294824,
             -0.02685539945203016, 0.11283625725084714, -0.3761262987767591,
             0.12837916659315382]
ERF_LARGE = [8.638994644664476e-05, -0.0002435072832946833, 0.00039256210758720753,
             -0.0009199995293455644, 0.0024046563528495072, -0.005608488572447138,
             0.01249144246871651, -0.026998681047247806, 0.0561100618981779,
             -0.11152133678883301, 0.21080637463687135]
ERF_SATURATES = 4.0

# 2/pi = TWO_OVER_PI[0] + TWO_OVER_PI[1] + ... to about 2**-190: pieces of 28 significant bits,
# so that a float32 (24 bits) times a piece is exact in float64.
TWO_OVER_PI = [0.6366197690367699, 3.3308114738561656e-09, 2.276010060734833e-18,
               1.234356326230651e-26, 2.2383930830835663e-35, 2.620403178028839e-44]
SIN_POLY = [-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1]
COS_POLY = [2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2]


def _f(value: float) -> Num:
    return const(f32(), value)


def _clamp(x: Num, lo: float, hi: float) -> Num:
    """``x`` limited to [lo, hi]; NaN becomes ``lo`` (so no poison flows into integer ops)."""
    x = select(x.ge(lo), x, lo)
    return select(x.le(hi), x, hi)


def _pow2(k: Num) -> Num:
    """2**k as f32 for an i32 ``k`` in [-126, 127]."""
    return bitcast((k + 127) << 23, f32())


def exp(x: Num) -> Num:
    xc = _clamp(x, EXP_MIN, EXP_MAX)
    n = round_even(xc * (1.0 / math.log(2.0)))
    r = multiply_add(n, -LN2_LO, multiply_add(n, -LN2_HI, xc))
    y = multiply_add(horner(r, EXP_POLY), r * r, r) + 1.0
    k = to_int(n, i32())
    half = k >> 1
    y = y * _pow2(half) * _pow2(k - half)
    return select(x.is_nan(), x, y)


def log(x: Num) -> Num:
    subnormal = x.lt(FLT_MIN)
    xs = select(subnormal, x * float(2 ** 23), x)
    bits = bitcast(xs, i32())
    e = (bits >> 23) - select(subnormal, const(i32(), 126 + 23), 126)
    m = bitcast((bits & 0x007FFFFF) | 0x3F000000, f32())       # in [0.5, 1)
    low = m.lt(SQRT_HALF)
    e = select(low, e - 1, e)
    m = select(low, m + m, m) - 1.0
    fe = to_float(e, f32())
    z = m * m
    y = m * z * horner(m, LOG_POLY) + fe * LN2_LO - z * 0.5
    y = m + y + fe * LN2_HI
    y = select(x.eq(math.inf), x, y)
    y = select(x.eq(0.0), -math.inf, y)
    return select(x.ge(0.0), y, math.nan)    # negative or NaN


def tanh(x: Num) -> Num:
    a = fabs(x)
    z = x * x
    small = horner(z, TANH_POLY) * z * x + x
    big = 1.0 - 2.0 / (exp(a + a) + 1.0)
    big = select(x.lt(0.0), -big, big)
    return select(a.ge(TANH_SMALL), big, small)


def sigmoid(x: Num) -> Num:
    e = exp(-fabs(x))
    r = 1.0 / (e + 1.0)
    return select(x.ge(0.0), r, e * r)


def erf(x: Num) -> Num:
    a = fabs(x)
    small = a + a * horner(a * a, ERF_SMALL)
    ac = select(a.lt(ERF_SATURATES), a, ERF_SATURATES)
    large = 1.0 - exp(-(ac * ac)) * horner((ac - 2.5) * (1.0 / 1.5), ERF_LARGE)
    y = select(a.lt(1.0), small, large)
    y = select(x.lt(0.0), -y, y)
    return select(x.is_nan(), x, y)


def _sin_cos(x: Num, quarter_turns: int) -> Num:
    """sin(x + quarter_turns * pi/2).  x * 2/pi is summed in float64 piece by piece, each
    exact product reduced to [-2, 2] (mod 4 quarter turns) first, so the fraction of a
    quarter turn stays accurate for every float32 x, however large."""
    finite = fabs(x).lt(math.inf)
    xd = to_float(select(finite, x, 0.0), f64())
    turns = const(f64(), 0.0)
    for piece in TWO_OVER_PI:
        product = xd * piece
        turns = turns + (product - round_even(product * 0.25) * 4.0)
    n = round_even(turns)
    r = to_float((turns - n) * (math.pi / 2), f32())
    quadrant = to_int(n, i32()) + quarter_turns
    z = r * r
    sin_r = horner(z, SIN_POLY) * z * r + r
    cos_r = horner(z, COS_POLY) * z * z - z * 0.5 + 1.0
    y = select((quadrant & 1).eq(1), cos_r, sin_r)
    y = select((quadrant & 2).eq(2), -y, y)
    return select(finite, y, math.nan)


def sin(x: Num) -> Num:
    return _sin_cos(x, 0)


def cos(x: Num) -> Num:
    return _sin_cos(x, 1)


def pow(a: Num, b: Num) -> Num:  # noqa: A001 - the language's name
    """``a ** b`` as ``numpy.power`` on floats: from a negative base (-0 and -inf included),
    an odd integer exponent gives a negative result, a non-integer one NaN when the base is
    finite and non-zero; ``b == 0``, ``a == 1`` and ``(-1) ** +-inf`` give 1."""
    magnitude = exp(b * log(fabs(a)))
    integral = floor(b).eq(b)
    half = b * 0.5
    odd = integral & floor(half).ne(half)
    negative_base = bitcast(a, i32()).lt(0)
    y = select(negative_base & odd, -magnitude, magnitude)
    y = select(a.lt(0.0) & a.gt(-math.inf) & logical_not(integral), math.nan, y)
    one = b.eq(0.0) | a.eq(1.0) | (a.eq(-1.0) & fabs(b).eq(math.inf))
    return select(one, 1.0, y)

"""Vectorisable float32 transcendentals, built from arith ops.

In: an f32 :class:`~tilec.codegen.cpu.scalar.Num` at the current insertion point.  Out: the
function's value as straight-line arith/math ops (no calls, no branches: every special case is
a ``select``), so that LLVM's loop vectorizer keeps the loop around them vectorised.  LLVM
would lower ``math.exp`` & co. to one libm call per element, which stops vectorisation.

Each function stays within a few float32 ulp of the exact result over the whole float32 range
(erf: within an absolute error, all GELU needs), inf and NaN as NumPy has them;
``test_cpu_mathlib.py`` measures the errors:

- ``exp``: x = n ln 2 + r with |r| <= ln 2 / 2 (Cody-Waite: ln 2 in two parts), e^r = 1 + w
  with w = r + r^2 Q(r), Q of degree 4 a minimax fit made for tilec (a linear program on a
  dense grid of the relative error, coefficients rounded to float32 one by one from the
  lowest, the others refitted: 3.1e-9 relative), and 2**n (1 + w) = fma(w, 2**n, 2**n), one
  rounding.  x / ln 2 is rounded to an integer by adding 1.5 * 2**23 (one fma), whose sum
  holds n in its low bits: no float -> int conversion (poison for NaN), so a NaN flows
  through as arithmetic, needing no select.  ``exp`` scales by two powers of two so that
  subnormal results come out right; ``exp_nonpositive`` (softmax's exp(x - max)) and the
  1 + exp(x) of ``sigmoid`` and ``tanh`` need only results that are normal floats or
  negligible beside 1 (or inf), and scale once, by 2**n built from the sum's bits shifted
  into the exponent field: +0 for n = -127, inf for n = 128.
- ``log``: exponent/mantissa split (subnormals rescaled first), Cephes polynomial.
- ``tanh``: Cephes odd polynomial for |x| < 0.625, else ``1 - 2 / (exp(2|x|) + 1)``.
- ``sigmoid``: ``1 / (1 + exp(-x))`` with -x limited to [-88, 88.8]: 1 above x = 87.68, 0
  below x = -88.37 (the exact value is below 5e-39); ``silu``: ``x / (1 + exp(-x))``, one
  rounding fewer than x * sigmoid(x).
- ``erf_nonnegative``: erf of x >= 0, one rational function ``x * P(x^2) / Q(x^2)`` of x
  limited to 4 (float32's erf is 1 beyond 3.92), the result limited to 1: no exp, no branch
  to select.  P and Q (degree 5, positive coefficients, so evaluation never cancels) are a
  minimax fit made for tilec (Lawson-reweighted least squares, P(0) = 2/sqrt(pi)): 2.4e-8 in
  exact arithmetic; float32's rounding of P and Q makes it about 3.5e-7 absolute near 1.
- ``gelu``: ``x Phi(x) = h + |h| erf(|x| / sqrt 2)`` with h = x / 2 (x erf(x) is even), that
  sum one fma: exact cancellation (0) where erf is 1 and x < 0; ``erf`` itself is
  ``erf_nonnegative(|x|)`` with the sign of x.
- ``sin``/``cos``: x * 2/pi modulo 4 in float64, with 2/pi in pieces whose products with a
  float32 are exact (so any float32 reduces accurately), Cephes polynomials on [-pi/4, pi/4].
- ``pow``: ``exp(b * log|a|)`` with NumPy's signs and special cases.

Two precisions (:class:`Precision`).  ``FULL``, the default, is all of the above.  ``NARROW``
is for a value that is rounded to float16 or bfloat16 before anything but a product or a
quotient reads it (the kernel decides where: see ``cpu.kernel``): exp's relative error and
erf's absolute error stay below 1e-5, a fiftieth of float16's rounding (4.9e-4), with fewer
operations.  exp reduces by a single float32 ln 2 (|n| <= 127 puts r within 2.4e-7 of exact) and
Q has degree 2 (5.3e-6 relative); erf is ``x * P(x^2) / Q(x^2)`` with P of degree 3 and Q of
degree 4 (4.1e-6 absolute), both minimax fits made for tilec like the full ones.  exp, softmax's
exp, sigmoid, silu, tanh and gelu take it; the others have one precision.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..common.erf import ERF_P, ERF_Q, ERF_SATURATES
from ..common.scalar import (Num, bitcast, const, f32, f64, fabs, floor, horner, i32, logical_not,
                     multiply_add, round_even, select, to_float, to_int)

# Cody-Waite split of ln 2: the first part has 9 significant bits, so n * LN2_HI is exact.
LN2_HI = 0.693359375
LN2_LO = -2.12194440e-4
# e^r = 1 + r + r^2 * EXP_Q(r) for |r| <= ln 2 / 2 (coefficients from the highest)
EXP_Q = [1.3820052e-3, 8.368683e-3, 4.1668274e-2, 1.6666521e-1, 4.9999994e-1]
EXP_MAX = 88.8     # exp overflows above 88.72
EXP_MIN = -104.0   # exp underflows to zero below -103.97
# where the exp that scales once has n = round(x / ln 2) = -127, whose 2**n is +0
EXP_NORMAL_MIN = -88.0
# 1.5 * 2**23: a float32 of magnitude below 2**22 plus this is rounded to an integer (to even),
# which the sum's mantissa holds in its low bits: bits(sum) - ROUNDING_SHIFT_BITS
ROUNDING_SHIFT = 12582912.0
ROUNDING_SHIFT_BITS = 0x4B400000

LOG_POLY = [7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
            1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
            3.3333331174e-1]
FLT_MIN = 1.17549435e-38
SQRT_HALF = 0.707106781186547524

TANH_POLY = [-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
             -3.33332819422e-1]
TANH_SMALL = 0.625

# erf(x) = x * ERF_P(x^2) / ERF_Q(x^2) for |x| <= ERF_SATURATES: from ..common.erf

# 2/pi = TWO_OVER_PI[0] + TWO_OVER_PI[1] + ... to about 2**-190: pieces of 28 significant bits,
# so that a float32 (24 bits) times a piece is exact in float64.
TWO_OVER_PI = [0.6366197690367699, 3.3308114738561656e-09, 2.276010060734833e-18,
               1.234356326230651e-26, 2.2383930830835663e-35, 2.620403178028839e-44]
# NARROW (see the module docstring); coefficients from the highest
LN2_F32 = 0.693147182464599609375    # ln 2 rounded to float32
EXP_Q_NARROW = [4.127773e-02, 1.6753514e-01, 5.0005114e-01]
ERF_P_NARROW = [1.5028382e-03, 4.9673963e-02, 1.7141542e-01, 1.1284084]
ERF_Q_NARROW = [7.028621e-05, 1.2366373e-02, 1.05257444e-01, 4.854788e-01, 1.0]

SIN_POLY = [-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1]
COS_POLY = [2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2]


@dataclass(frozen=True)
class Precision:
    """The coefficients of the functions that come in two precisions."""

    ln2: tuple[float, ...]    # ln 2 in parts: each n * part but the last exact
    exp_q: tuple[float, ...]
    erf_p: tuple[float, ...]
    erf_q: tuple[float, ...]


FULL = Precision((LN2_HI, LN2_LO), tuple(EXP_Q), tuple(ERF_P), tuple(ERF_Q))
NARROW = Precision((LN2_F32,), tuple(EXP_Q_NARROW), tuple(ERF_P_NARROW), tuple(ERF_Q_NARROW))


def _at_least(x: Num, lo: float) -> Num:
    """``max(x, lo)``; NaN stays NaN (the select keeps ``x`` when its comparison is false)."""
    return select(x.lt(lo), lo, x)


def _at_most(x: Num, hi: float) -> Num:
    """``min(x, hi)``; NaN stays NaN."""
    return select(x.gt(hi), hi, x)


def _limit(x: Num, lo: float, hi: float) -> Num:
    """``x`` limited to [lo, hi]; NaN stays NaN."""
    return _at_most(_at_least(x, lo), hi)


def _pow2(k: Num) -> Num:
    """2**k as f32 for an i32 ``k`` in [-126, 127]."""
    return bitcast((k + 127) << 23, f32())


def _exp_parts(x: Num, precision: Precision) -> tuple[Num, Num]:
    """``(shifted, w)`` with x = n ln 2 + r, ``shifted`` = 1.5 * 2**23 + n and
    w = e^r - 1."""
    shifted = multiply_add(x, 1.0 / math.log(2.0), ROUNDING_SHIFT)
    n = shifted - ROUNDING_SHIFT
    r = x
    for part in precision.ln2:
        r = multiply_add(n, -part, r)
    return shifted, multiply_add(horner(r, precision.exp_q), r * r, r)


def exp(x: Num, precision: Precision = FULL) -> Num:
    shifted, w = _exp_parts(_limit(x, EXP_MIN, EXP_MAX), precision)
    n = bitcast(shifted, i32()) - ROUNDING_SHIFT_BITS
    half = n >> 1
    first = _pow2(n - half)
    return multiply_add(w, first, first) * _pow2(half)


def _scale(shifted: Num) -> Num:
    """2**n from ``shifted`` = 1.5 * 2**23 + n, its bits shifted into the exponent field: a
    normal float32 for n in [-126, 127], +0 for n = -127, inf for n = 128."""
    return bitcast((bitcast(shifted, i32()) << 23) + 0x3F800000, f32())


def exp_nonpositive(x: Num, precision: Precision = FULL) -> Num:
    """e^x for x <= 0 or NaN (softmax's x - max), scaled once: within 1 ulp where e^x is a
    normal float32 (x >= -87.33), exactly 0 where n = -127 (x < -87.68, -inf included), in
    between e^x within 1 ulp of a subnormal."""
    shifted, w = _exp_parts(_at_least(x, EXP_NORMAL_MIN), precision)
    scale = _scale(shifted)
    return multiply_add(w, scale, scale)


def _one_plus_exp(x: Num, precision: Precision) -> Num:
    """1 + e^x for x in [EXP_NORMAL_MIN, EXP_MAX] (or NaN), scaled once: exactly 1 where
    n = -127 (x < -87.68), inf where n = 128 (x > 88.37)."""
    shifted, w = _exp_parts(x, precision)
    return multiply_add(w + 1.0, _scale(shifted), 1.0)


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


def tanh(x: Num, precision: Precision = FULL) -> Num:
    a = fabs(x)
    z = x * x
    small = horner(z, TANH_POLY) * z * x + x
    big = 1.0 - 2.0 / _one_plus_exp(_at_most(a + a, EXP_MAX), precision)
    big = select(x.lt(0.0), -big, big)
    return select(a.ge(TANH_SMALL), big, small)


def _one_plus_exp_of_minus(x: Num, precision: Precision) -> Num:
    return _one_plus_exp(_limit(-x, EXP_NORMAL_MIN, EXP_MAX), precision)


def sigmoid(x: Num, precision: Precision = FULL) -> Num:
    return 1.0 / _one_plus_exp_of_minus(x, precision)


def silu(x: Num, precision: Precision = FULL) -> Num:
    return x / _one_plus_exp_of_minus(x, precision)


def erf_nonnegative(x: Num, precision: Precision = FULL) -> Num:
    """erf(x) for x >= 0 or NaN (GELU's erf(|x| / sqrt 2))."""
    xc = _at_most(x, ERF_SATURATES)
    t = xc * xc
    return _at_most(xc * horner(t, precision.erf_p) / horner(t, precision.erf_q), 1.0)


def erf(x: Num) -> Num:
    """erf(x), odd: the sign of x on erf(|x|) (NaN stays NaN)."""
    e = erf_nonnegative(fabs(x))
    return select(x.cmp("lt", 0.0), -e, e)


def gelu(x: Num, precision: Precision = FULL) -> Num:
    half = x * 0.5
    return multiply_add(fabs(half), erf_nonnegative(fabs(x) * SQRT_HALF, precision), half)


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

"""The rounding allowance of language.md's numerical contract, one rule per built-in.

In: the float64 values the reference computes (:mod:`.reference`), each operand's allowance (a
float64 array of bounds on how far a float32 kernel's value may lie from the reference's for
rounding alone, broadcastable to the value) and the op's result.  Out: the allowance of the
result.  The reference carries one alongside every value, ``tilec verify`` adds it to the
tolerance: ``|got - want| <= atol + rtol * |want| + allowance``.

- a sum or dot product of K terms: ``4 * sqrt(K) * u * sum(|terms|)`` (u = 2**-24) plus the
  sum of the terms' allowances;
- an element-wise built-in: ``u * |result|`` plus how far its result moves when each operand
  moves within its allowance (:data:`UNARY` and :data:`BINARY`: one row per built-in; a
  monotone function's spread is exact, the others use a bound of their slope);
- ``reduce_var``, ``softmax`` and ``normalize`` have rules of their own (:func:`variance`,
  :func:`softmax`, :func:`normalize`), not those of their steps;
- a value that is infinite or NaN carries none: it must match exactly;
- rounding to a narrower type (a ``cast``, a ``return``) accepts either neighbour of the
  rounded value where the allowance reaches across a rounding point (:func:`rounded`); a cast
  to int32 also moves its operand by the operand's tolerance, as a kernel computes that
  operand only within it.

A mask's allowance is 1 where a kernel may compute the other truth value (the comparison's
operands are within their allowances of each other), else 0.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .numerics import TOLERANCES, to_dtype

U = 2.0 ** -24
"""The unit roundoff of float32, the arithmetic the allowance assumes kernels compute in."""

Spread = Callable[[np.ndarray, np.ndarray], np.ndarray]
Spread2 = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def _monotone(f: Callable[[np.ndarray], np.ndarray], pole: bool = False) -> Spread:
    """How far monotone ``f`` moves over ``[x - d, x + d]``: exact.  ``pole``: ``f`` is
    monotone only on each side of 0, so an interval around 0 is unbounded."""
    def spread(x: np.ndarray, d: np.ndarray) -> np.ndarray:
        fx = f(x)
        s = np.maximum(np.abs(f(x + d) - fx), np.abs(f(x - d) - fx))
        return np.where(np.abs(x) <= d, np.inf, s) if pole else s
    return spread


def _slope(bound: float) -> Spread:
    """A function whose slope is at most ``bound`` everywhere."""
    return lambda x, d: bound * d


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


UNARY: dict[str, Spread] = {
    "exp": _monotone(np.exp),
    "log": _monotone(np.log),
    "sqrt": _monotone(np.sqrt),
    "rsqrt": _monotone(lambda x: 1.0 / np.sqrt(x), pole=True),
    "abs": _slope(1.0),
    "neg": _slope(1.0),
    "reciprocal": _monotone(lambda x: 1.0 / x, pole=True),
    "sigmoid": _monotone(_sigmoid),
    "tanh": _monotone(np.tanh),
    "relu": _slope(1.0),
    "silu": _slope(1.1),         # max of x * sigmoid(x)' is 1.0998
    "gelu": _slope(1.13),        # max of gelu' is 1.1289
    "gelu_tanh": _slope(1.13),
    "sin": _slope(1.0),
    "cos": _slope(1.0),
    "erf": _slope(1.13),         # max of erf' is 2 / sqrt(pi) = 1.1284
    "round": lambda x, d: np.abs(np.rint(x + d) - np.rint(x - d)),   # the steps crossed
}
"""Per unary built-in: a bound on ``|f(x') - f(x)|`` for ``|x' - x| <= d``, given (x, d).  A
new unary built-in adds its row here (test_op_facts fails until it does)."""


def _pow(a: np.ndarray, b: np.ndarray, da: np.ndarray, db: np.ndarray) -> np.ndarray:
    """pow moves at most as far as at a corner of the box around (a, b): it is monotone in
    each operand where it is defined (NaN, a corner where it is not, counts as unbounded)."""
    here = np.power(a, b)
    corners = [np.abs(np.power(a + sa * da, b + sb * db) - here)
               for sa in (-1, 1) for sb in (-1, 1)]
    return np.nan_to_num(np.maximum.reduce(corners), nan=np.inf)


def _div(a: np.ndarray, b: np.ndarray, da: np.ndarray, db: np.ndarray) -> np.ndarray:
    room = np.abs(b) - db
    with np.errstate(divide="ignore", invalid="ignore"):
        s = (np.abs(a) * db + np.abs(b) * da) / (np.abs(b) * room)
    return np.where(room > 0, s, np.inf)


BINARY: dict[str, Spread2] = {
    "add": lambda a, b, da, db: da + db,
    "sub": lambda a, b, da, db: da + db,
    "mul": lambda a, b, da, db: np.abs(b) * da + np.abs(a) * db + da * db,
    "div": _div,
    "max": lambda a, b, da, db: np.maximum(da, db),
    "min": lambda a, b, da, db: np.maximum(da, db),
    "pow": _pow,
}
"""Per binary built-in: a bound on how far its result moves when each operand moves within
its allowance, given (a, b, da, db).  A new binary built-in adds its row here."""


def unary_rule(name: str) -> Spread:
    if name not in UNARY:
        raise KeyError(f"the allowance has no row for the unary built-in '{name}': add one "
                       "to tilec.harness.allowance.UNARY")
    return UNARY[name]


def binary_rule(name: str) -> Spread2:
    if name not in BINARY:
        raise KeyError(f"the allowance has no row for the binary built-in '{name}': add one "
                       "to tilec.harness.allowance.BINARY")
    return BINARY[name]


def finite_only(value: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``d`` shaped like ``value``: 0 where the value is infinite or NaN (it must match
    exactly), unbounded where the bound itself is NaN (an inf - inf in a rule)."""
    d = np.broadcast_to(np.asarray(d, dtype=np.float64), np.shape(value))
    if np.asarray(value).dtype == np.bool_:
        return d.copy()
    return np.where(np.isfinite(value), np.where(np.isnan(d), np.inf, d), 0.0)


def rounding(value: np.ndarray) -> np.ndarray:
    """One float32 rounding of ``value`` (nothing for integers and masks)."""
    if np.asarray(value).dtype != np.float64:
        return np.zeros(np.shape(value))
    return U * np.abs(value)


def elementwise(name: str, xs: list[np.ndarray], ds: list[np.ndarray],
                result: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        if len(xs) == 1:
            moved = unary_rule(name)(xs[0].astype(np.float64), ds[0])
        else:
            moved = binary_rule(name)(*(x.astype(np.float64) for x in xs), *ds)
        return finite_only(result, rounding(result) + moved)


def spread_sum(linear: np.ndarray, squares: np.ndarray) -> np.ndarray:
    """How far a sum moves when each term moves within its allowance, given the sum of
    those allowances and of their squares: 4 times their root sum of squares (the terms'
    rounding errors are independent: a probabilistic bound, as for the sum's own rounding),
    never more than their sum."""
    return np.minimum(linear, 4.0 * np.sqrt(squares))


def summed(terms: np.ndarray, d: np.ndarray, axes: tuple[int, ...], keepdims: bool,
           count: int) -> np.ndarray:
    """A sum of ``count`` terms over ``axes``: its rounding and its terms' allowances."""
    d = np.broadcast_to(d, terms.shape)
    total = spread_sum(np.sum(d, axis=axes, keepdims=keepdims),
                       np.sum(d * d, axis=axes, keepdims=keepdims))
    if terms.dtype != np.float64:
        return total
    return total + 4.0 * math.sqrt(count) * U * np.sum(np.abs(terms), axis=axes,
                                                       keepdims=keepdims)


def reduction(kind: str, x: np.ndarray, d: np.ndarray, axes: tuple[int, ...],
              keepdims: bool, result: np.ndarray) -> np.ndarray:
    count = math.prod(x.shape[a] for a in axes)
    with np.errstate(all="ignore"):
        if kind in ("max", "min"):    # the max moves no further than the farthest operand
            moved = np.max(np.broadcast_to(d, x.shape), axis=axes, keepdims=keepdims,
                           initial=0.0)
        elif kind == "sum":
            moved = summed(x, d, axes, keepdims, count)
        elif kind == "mean":
            moved = summed(x, d, axes, keepdims, count) / max(count, 1) + rounding(result)
        elif kind == "var":
            moved = variance(x, d, axes, keepdims, count)
        else:
            raise KeyError(f"the allowance has no rule for reduce_{kind}")
        return finite_only(result, moved)


def variance(x: np.ndarray, d: np.ndarray, axes: tuple[int, ...], keepdims: bool,
             count: int) -> np.ndarray:
    """``reduce_var`` as kernels compute it, in two passes: the mean m' (off by e), then the
    mean of (x - m')^2.  Since sum(x - m) = 0, e only enters squared; each deviation rounds
    once, each square once, the mean of squares as any mean.  An operand's allowance moves
    the variance by at most 2 * mean(|x - m| * d) + mean(d^2)."""
    n = max(count, 1)
    mean = np.mean(x, axis=axes, keepdims=True)
    c = np.abs(x - mean)
    scale = 4.0 * math.sqrt(n) * U
    e = scale * np.mean(np.abs(x), axis=axes, keepdims=True) + U * np.max(
        c, axis=axes, keepdims=True, initial=0.0)
    squares = np.mean(c * c, axis=axes, keepdims=True)
    d = np.broadcast_to(d, x.shape)
    moved = 2.0 * np.mean(c * d, axis=axes, keepdims=True) + np.mean(d * d, axis=axes,
                                                                     keepdims=True)
    total = (scale + 4.0 * U) * squares + e * e + moved
    return total if keepdims else np.squeeze(total, axis=axes)


def softmax(x: np.ndarray, d: np.ndarray, result: np.ndarray, axis: int) -> np.ndarray:
    """softmax(x)_i = exp(x_i - max) / sum: its log moves by at most d_i + max_j d_j when x
    moves within d; the exponentials round once (a few ulp), their sum as a sum of K positive
    terms, the quotient once."""
    count = x.shape[axis]
    d = np.broadcast_to(d, x.shape)
    with np.errstate(all="ignore"):
        moved = np.expm1(d + np.max(d, axis=axis, keepdims=True, initial=0.0))
        rel = moved + (4.0 * math.sqrt(max(count, 1)) + 6.0) * U
        return finite_only(result, np.abs(result) * rel)


NORMALIZE_ROUNDINGS = 4.5
"""How many units ``u * |y|`` a float32 ``normalize`` rounds by: its subtraction (u), its
``var + eps`` (u on the sum, half of it on y), its ``rsqrt`` (an ulp, 2u: kernels may compute
``1 / sqrt``, which rounds twice) and its product (u)."""


def normalize(xs: list[np.ndarray], ds: list[np.ndarray], result: np.ndarray) -> np.ndarray:
    """``normalize(x, mean, var, eps) = (x - mean) * rsqrt(var + eps)`` as one built-in,
    given its four operands (broadcast to the result) and their allowances.

    With c = x - mean, s = var + eps, r = s**-1/2 and y = c * r, its condition numbers are
    dy/dx = r, dy/dmean = -r and dy/dvar = dy/deps = -y / (2 s).  Their first-order bound
    ``r (dx + dmean) + |y| (dvar + deps) / (2 s)`` understates the move where s - (dvar +
    deps) nears 0, so the row takes the exact one over the box of operands: y moves furthest
    at the corner |c| + dc, s - ds (r falls as s grows), by ``r dc + (|c| + dc) (r(s - ds) -
    r)``, unbounded where s - ds <= 0.  To it come the kernel's own roundings,
    :data:`NORMALIZE_ROUNDINGS` times ``u * |y|``."""
    x, mean, var, eps = xs
    dc, dsum = ds[0] + ds[1], ds[2] + ds[3]
    with np.errstate(all="ignore"):
        c, s = np.abs(x - mean), var + eps
        r, low = 1.0 / np.sqrt(s), s - dsum
        dr = np.where(low > 0, 1.0 / np.sqrt(np.where(low > 0, low, 1.0)) - r, np.inf)
        moved = r * dc + (c + dc) * dr
        return finite_only(result, NORMALIZE_ROUNDINGS * U * np.abs(result) + moved)


def matmul(a: np.ndarray, b: np.ndarray, da: np.ndarray, db: np.ndarray) -> np.ndarray:
    """Each element a dot product of K terms: its rounding, and how far it moves when the
    operands move within their allowances (term k moves by at most
    ``|b_k| da_k + (|a_k| + da_k) db_k``, combined as :func:`spread_sum` does)."""
    count = a.shape[-1]
    abs_a, abs_b = np.abs(a), np.abs(b)
    total = 4.0 * math.sqrt(count) * U * np.matmul(abs_a, abs_b)
    if np.any(da):
        da = np.broadcast_to(da, a.shape)
        total = total + spread_sum(np.matmul(da, abs_b), np.matmul(da * da, abs_b * abs_b))
    if np.any(db):
        reach = abs_a + (da if np.any(da) else 0.0)
        db = np.broadcast_to(db, b.shape)
        total = total + spread_sum(np.matmul(reach, db), np.matmul(reach * reach, db * db))
    return total


def rounded(value: np.ndarray, d: np.ndarray, source: str, dtype: str) -> np.ndarray:
    """The allowance of ``value`` (of element type ``source``) rounded to ``dtype``: how far
    a kernel's value, within ``d`` of ``value``, may round from where ``value`` rounds (to
    either neighbour where ``d`` reaches across a rounding point).  To int32 the operand
    also moves by its tolerance (a kernel computes it only within that) and truncates."""
    if dtype == "bool" or source in ("int32", "bool") and dtype == "int32":
        return np.broadcast_to(d, np.shape(value)).copy()
    if dtype == "int32":
        rtol, atol = TOLERANCES[source]
        d = d + atol + rtol * np.abs(value)

        def convert(v: np.ndarray) -> np.ndarray:
            return np.trunc(v)
    else:
        def convert(v: np.ndarray) -> np.ndarray:
            return to_dtype(v, dtype).astype(np.float64)
    with np.errstate(all="ignore"):
        here = convert(value)
        moved = np.maximum(np.abs(convert(value + d) - here), np.abs(convert(value - d) - here))
        return finite_only(here, np.where(d > 0, moved, 0.0))

"""Result shapes of a tilec function from its arguments' sizes, symbolic or not.

In: a :class:`~tilec.runtime.loader.Function`'s declared shapes (polynomials over shape
symbols, ``...``) and the arguments' sizes, plain ints or PyTorch ``SymInt``s under
``torch.compile(dynamic=True)``/``torch.export``.  Out: the result shapes, and the conditions
the sizes must meet (``2*hidden`` even, a symbol the same in every argument), each a ``bool``
or a ``SymBool`` with its message.  The caller checks them with ``torch._check`` (a generic
kernel: recorded as facts about the symbols, no specialisation) or branches on them (shape-
template variants only: guards that specialise on the variant's sizes).
Arithmetic stays in integers (coefficients scaled by their common denominator) so that it
works on ``SymInt``s.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..dims import ELLIPSIS, Dim

Size = Any   # int or torch.SymInt


@dataclass
class Solution:
    symbols: dict[str, Size] = field(default_factory=dict)
    lead: tuple[Size, ...] | None = None
    conditions: list[tuple[Any, str]] = field(default_factory=list)   # (bool | SymBool, why)


def _scaled(d: Dim) -> tuple[int, dict[tuple[str, ...], int]]:
    """(D, integer terms of D * d) with D the common denominator of d's coefficients."""
    scale = math.lcm(*(c.denominator for c in d.terms.values())) if d.terms else 1
    return scale, {m: int(c * scale) for m, c in d.terms.items()}


def _value(terms: dict[tuple[str, ...], int], symbols: dict[str, Size]) -> Size:
    total: Size = 0
    for monomial, c in terms.items():
        product: Size = c
        for s in monomial:
            product = product * symbols[s]
        total = total + product
    return total


def _solve(d: Dim, size: Size, known: dict[str, Size], where: str,
           out: Solution) -> bool:
    """Bind the one unknown symbol of ``d`` from ``size`` where ``d`` is linear in it."""
    scale, terms = _scaled(d)
    unknown = d.symbols() - known.keys()
    if len(unknown) != 1:
        return False
    (name,) = unknown
    if any(name in m and m != (name,) for m in terms):
        return False
    a = terms.pop((name,))
    rest = size * scale - _value(terms, known)
    out.conditions.append((rest % a == 0, f"{where} is {d}: {name} must be an integer"))
    known[name] = rest // a
    out.conditions.append((known[name] >= 0, f"{where} is {d}: {name} must be >= 0"))
    return True


def solve(params: Sequence[tuple[str, tuple]], sizes: Sequence[Sequence[Size]]) -> Solution:
    """Bind the symbols of ``params`` (argument name, declared shape) from ``sizes``."""
    out = Solution()
    pending: list[tuple[Dim, Size, str]] = []
    for (name, declared), actual in zip(params, sizes):
        generic = bool(declared) and declared[0] == ELLIPSIS
        dims = declared[1:] if generic else declared
        k = len(actual) - len(dims)
        if k < 0 or (k > 0 and not generic):
            rank = f">= {len(dims)}" if generic else str(len(dims))
            raise ValueError(f"argument '{name}': expected rank {rank}, got rank {len(actual)}")
        if generic and out.lead is None:
            out.lead = tuple(actual[:k])
        elif generic:
            if len(out.lead) != k:
                raise ValueError(f"argument '{name}': its '...' has {k} dimensions, another "
                                 f"argument's {len(out.lead)}")
            out.conditions += [(a == b, f"argument '{name}': its '...' dimensions differ from "
                                "another argument's") for a, b in zip(actual[:k], out.lead)]
        pending += [(d, s, f"argument '{name}' dimension {k + i}")
                    for i, (d, s) in enumerate(zip(dims, actual[k:]))]
    progress = True
    while progress:
        progress = False
        for item in list(pending):
            if _solve(item[0], item[1], out.symbols, item[2], out):
                pending.remove(item)
                progress = True
    for d, size, where in pending:
        unknown = sorted(d.symbols() - out.symbols.keys())
        if unknown:
            raise ValueError(f"{where} is {d}: cannot bind {', '.join(unknown)}")
        scale, terms = _scaled(d)
        out.conditions.append((_value(terms, out.symbols) == size * scale,
                               f"{where}: expected {d}"))
    return out


def broadcasts(pairs: Sequence[Sequence], solution: Solution) -> None:
    """The run-time broadcasts of a function (``[symbol, to, message, either]``, the library
    metadata's ``broadcasts``): ``symbol`` must equal ``to`` or be 1, or with ``either``
    ``to`` may be 1 instead."""
    for symbol, to, message, *either in pairs:
        a, b = solution.symbols[symbol], solution.symbols[to]
        holds = (a == b) | (a == 1)
        solution.conditions.append((holds | (b == 1) if any(either) else holds, message))


def extent(d: Dim, symbols: dict[str, Size], out: Solution, where: str) -> Size:
    """The value of ``d`` (a result dimension) under ``symbols``."""
    scale, terms = _scaled(d)
    total = _value(terms, symbols)
    if scale != 1:
        out.conditions.append((total % scale == 0, f"{where} is {d}: not an integer"))
    value = total // scale
    out.conditions.append((value >= 0, f"{where} is {d}: negative"))
    return value


def result_shapes(results: Sequence[tuple], solution: Solution) -> list[tuple[Size, ...]]:
    """The shapes of ``results`` (declared shapes) under ``solution``."""
    shapes = []
    for r, declared in enumerate(results):
        generic = bool(declared) and declared[0] == ELLIPSIS
        dims = declared[1:] if generic else declared
        own = tuple(extent(d, solution.symbols, solution, f"result {r} dimension {i}")
                    for i, d in enumerate(dims))
        shapes.append((solution.lead or ()) + own if generic else own)
    return shapes

"""Shape symbols bound from the shapes of a call's arguments.

Shared by the reference interpreter and the Python runtime, so both accept and refuse exactly
the same calls with the same words.  Pure Python on :mod:`tilec.dims`: no MLIR, so a built
library runs where only NumPy is installed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .dims import Dim, Shape, certain, has_ellipsis


class BindError(ValueError):
    """The argument shapes do not fit the parameters: names the argument and the dimension."""


@dataclass(frozen=True)
class Binding:
    symbols: dict[str, int]
    lead: tuple[int, ...] | None      # what `...` stands for (None: no `...` parameter)


def bind(params: Sequence[tuple[str, Shape]], shapes: Sequence[Sequence[int]]) -> Binding:
    """Bind symbols and `...` from ``shapes`` (one per ``(name, declared shape)`` parameter).

    A dimension linear in one unknown symbol binds it (``2*hidden`` given 8 binds hidden = 4),
    repeatedly; then every dimension must evaluate to its actual extent."""
    lead: tuple[int, ...] | None = None
    lead_from = ""
    sizes: list[tuple[str, int, Dim, int]] = []  # (argument, axis, declared, actual)
    for (name, declared), actual in zip(params, shapes):
        actual = tuple(int(s) for s in actual)
        dims, generic = certain(declared), has_ellipsis(declared)
        k = len(actual) - len(dims)  # the number of '...' dimensions
        if k < 0 or (k > 0 and not generic):
            rank = f">= {len(dims)}" if generic else str(len(dims))
            raise BindError(f"argument '{name}': expected rank {rank} (shape "
                            f"[{', '.join(str(d) for d in declared)}]), got rank {len(actual)} "
                            f"(shape {actual})")
        if generic and lead is None:
            lead, lead_from = actual[:k], name
        elif generic and actual[:k] != lead:
            raise BindError(f"argument '{name}': its '...' dimensions {actual[:k]} differ from "
                            f"{lead} of argument '{lead_from}'")
        sizes += [(name, k + i, d, s) for i, (d, s) in enumerate(zip(dims, actual[k:]))]

    symbols: dict[str, int] = {}
    bound_by: dict[str, str] = {}
    progress = True
    while progress:
        progress = False
        for name, axis, d, size in sizes:
            solved = d.solve_for(size, symbols)
            if solved is None:
                continue
            sym, value = solved
            if value.denominator != 1 or value < 0:
                raise BindError(f"argument '{name}' dimension {axis} is {d} = {size}: {sym} would "
                                f"be {value}, not a non-negative integer")
            symbols[sym] = int(value)
            bound_by[sym] = f"argument '{name}' dimension {axis}"
            progress = True

    for name, axis, d, size in sizes:
        unknown = sorted(d.symbols() - symbols.keys())
        if unknown:
            raise BindError(f"argument '{name}' dimension {axis} is {d}: cannot bind "
                            f"{', '.join(unknown)} from the argument shapes")
        want = d.evaluate(symbols)
        if want == size:
            continue
        syms = sorted(d.symbols())
        if not syms:
            raise BindError(f"argument '{name}' dimension {axis}: expected {d}, got {size}")
        if d == Dim.sym(syms[0]):
            raise BindError(f"symbol {syms[0]} is {symbols[syms[0]]} from {bound_by[syms[0]]} but "
                            f"argument '{name}' dimension {axis} is {size}")
        given = ", ".join(f"{s} = {symbols[s]} from {bound_by[s]}" for s in syms)
        raise BindError(f"argument '{name}' dimension {axis}: expected {d} = {want} ({given}), "
                        f"got {size}")
    return Binding(symbols, lead)

"""Lazy row values for the Ascend C lowering: where their elements live, and the operations
on trees of them that the traversals need.

In: :mod:`tilec.codegen.common.values` (views, splats, maps, concatenations), whose views here
hold a :class:`Gm` (a ``GlobalTensor`` of the kernel) and a :class:`Base` (the part of their
offset that depends on loop variables: grid coordinates, reduction and matmul loops) and
whose splats hold C++ scalar expressions.  Out: new trees (a tree fixed at loop indices,
reshaped, a reduction spread back) and what a traversal asks of one (its leaves, a comment).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Sequence

from ...dims import Dim
from ..common.values import ZERO, Concat, Lazy, Map, Splat, View, is_ramp, reindex, row_major
from . import cxx


@dataclass(frozen=True)
class Gm:
    """A global tensor of the kernel: its ``GlobalTensor`` member and element type."""

    member: str
    dtype: str


@dataclass(frozen=True)
class Base:
    """The loop-dependent part of a view's offset: ``sum(var * stride)`` over ``terms``
    ``(var, stride, extent)``; a term with an ``extent`` counts 0 when that extent is 1 at run
    time (a dimension broadcast only then).  Grid coordinates are ``g0, g1, ...``."""

    terms: tuple[tuple[str, Dim, Optional[Dim]], ...] = ()

    def expr(self) -> str:
        parts = []
        for var, stride, extent in self.terms:
            term = cxx.times(var, stride)
            parts.append(f"({cxx.dim(extent)} == 1 ? 0 : {term})" if extent else term)
        return cxx.index(*parts)

    def plus(self, var: str, stride: Dim) -> "Base":
        return Base(self.terms + ((var, stride, None),)) if stride != ZERO else self


def grid_var(j: int) -> str:
    """The C++ name of grid coordinate ``j`` in a kernel's row loop."""
    return f"g{j}"


def is_grid(var: str) -> bool:
    """Whether a :class:`Base` term's variable is a grid coordinate."""
    return var[0] == "g" and var[1:].isdigit()


def view_key(v: View) -> tuple:
    """What identifies the elements of a view (two views with one key load once)."""
    return (v.buffer, v.base, v.offset, v.sizes, v.strides)


def leaves(tree: Lazy) -> dict[tuple, View]:
    """The views a tree reads, by key."""
    found: dict[tuple, View] = {}

    def walk(x: Lazy) -> None:
        if isinstance(x, View):
            found.setdefault(view_key(x), x)
        elif isinstance(x, Map):
            for operand in x.operands:
                walk(operand)
        elif isinstance(x, Concat):
            for part in x.parts:
                walk(part)
    walk(tree)
    return found


def fix(x: Lazy, axes: Sequence[int], index: Sequence[str]) -> Lazy:
    """``x`` at loop variables ``index`` along ``axes`` (those axes gone)."""
    dropped = set(axes)
    sizes = tuple(d for a, d in enumerate(x.sizes) if a not in dropped)
    if isinstance(x, Splat):
        return replace(x, sizes=sizes)
    if isinstance(x, View):
        base = x.base if isinstance(x.base, Base) else Base()
        for a, var in zip(axes, index):
            base = base.plus(var, x.strides[a])
        return replace(x, base=base, sizes=sizes,
                       strides=tuple(s for a, s in enumerate(x.strides) if a not in dropped))
    if isinstance(x, Map):
        return replace(x, operands=tuple(v if not v.sizes else fix(v, axes, index)
                                         for v in x.operands), sizes=sizes)
    assert x.axis not in dropped, "a concatenation is never indexed along its axis"
    axis = x.axis - sum(1 for a in dropped if a < x.axis)
    parts = (fix(x.parts[0], axes, index), fix(x.parts[1], axes, index))
    return Concat(parts, axis, sizes, x.dtype)


def spread(x: Lazy, sizes: Sequence[Dim], axes: Sequence[int]) -> Lazy:
    """A keepdims reduction ``x`` broadcast back over its reduced ``axes``."""
    moved = reindex(x, sizes, [None if a in axes else a for a in range(len(sizes))])
    assert moved is not None, "a reduction is never a concatenation"
    return moved


def reshaped(x: Lazy, sizes: tuple[Dim, ...]) -> Optional[Lazy]:
    """``x`` in row-major order with new ``sizes``, when that is a view of it: a contiguous
    view, a scalar, or a map of those; None otherwise."""
    if isinstance(x, Splat):
        return replace(x, sizes=sizes)
    if isinstance(x, View):
        if not x.is_row_major():
            return None
        return replace(x, sizes=sizes, strides=row_major(sizes))
    if isinstance(x, Map):
        operands = [v if not v.sizes else reshaped(v, sizes) for v in x.operands]
        if any(v is None for v in operands):
            return None
        return replace(x, operands=tuple(operands), sizes=sizes)
    return None


def small_power(base: Lazy, exponent: Lazy) -> Optional[Lazy]:
    """``pow(x, c)`` for a literal c in 1, 2, 3, -1 as multiplications (exact, or one
    rounding more, as NumPy's power is)."""
    if not isinstance(exponent, Splat) or exponent.value not in ("1.0f", "2.0f", "3.0f",
                                                                "-1.0f"):
        return None
    c = exponent.value
    if c == "1.0f":
        return base
    if c == "-1.0f":
        return Map("reciprocal", (base,), base.sizes, base.dtype)
    square = Map("mul", (base, base), base.sizes, base.dtype)
    return square if c == "2.0f" else Map("mul", (square, base), base.sizes, base.dtype)


def describe(x: Lazy) -> str:
    """A short text of a tree, for comments in the generated code."""
    if is_ramp(x):
        return "iota"
    if isinstance(x, View):
        return x.buffer.member
    if isinstance(x, Splat):
        return x.value
    if isinstance(x, Map):
        return f"{x.op}({', '.join(describe(v) for v in x.operands)})"
    return f"concat({describe(x.parts[0])}, {describe(x.parts[1])})"

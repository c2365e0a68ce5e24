"""C++ text for the Ascend C generator: an indenting line writer, literals, and dimension
polynomials as ``int64_t`` expressions.

In: :class:`~tilec.dims.Dim` polynomials over shape symbols, Python numbers.  Out: C++ source
text.  Symbols are read from the kernel's tiling struct ``t`` (``t.sym_hidden``; the
anonymous ``$0`` peeled off ``...`` is ``t.sym_0``; the product of the ``...`` extents is
``t.lead``).
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator, Sequence

import numpy as np

from ...dims import Dim
from ..common.values import LEAD

class Code:
    """Lines of C++ with the current indentation."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0

    def __call__(self, line: str = "") -> None:
        self.lines.append("  " * self.depth + line if line else "")

    @contextmanager
    def loops(self, bounds: Sequence[tuple[str, object, object]]) -> Iterator[None]:
        """``for`` loops nested in the order given, one per ``(variable, start, stop)``."""
        for var, start, stop in bounds:
            self(f"for (int64_t {var} = {start}; {var} < {stop}; ++{var}) {{")
            self.depth += 1
        yield
        for _ in bounds:
            self.depth -= 1
            self("}")

    @contextmanager
    def block(self, head: str, tail: str = "}") -> Iterator[None]:
        """``head {`` ... ``}`` (a bare block without a head) with the body indented one
        level."""
        self(f"{head} {{" if head else "{")
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            self(tail)


def symbol_field(name: str) -> str:
    """The tiling struct's field holding symbol ``name``."""
    if name == LEAD:
        return "lead"
    return "sym_" + name.lstrip("$")


def dim(d: Dim) -> str:
    """``d`` as an ``int64_t`` expression (exact: the host checked every dimension is a
    non-negative integer before the launch)."""
    if d.value is not None:
        return str(d.value)
    scale = math.lcm(*(c.denominator for c in d.terms.values()))
    text = ""
    for monomial, coef in sorted(d.terms.items(), key=lambda mc: (-len(mc[0]), mc[0])):
        c = int(coef * scale)
        factors = ([str(abs(c))] if abs(c) != 1 or not monomial else []) \
            + [f"t.{symbol_field(s)}" for s in monomial]
        body = " * ".join(factors)
        text = (f"{text} {'-' if c < 0 else '+'} {body}" if text
                else ("-" if c < 0 else "") + body)
    if scale != 1:
        return f"({text}) / {scale}"
    return text if " " not in text else f"({text})"


def index(*terms: str) -> str:
    """A sum of ``int64_t`` index expressions, zeros dropped."""
    kept = [t for t in terms if t and t != "0"]
    return " + ".join(kept) if kept else "0"


def times(expr: str, d: Dim) -> str:
    """``expr * d`` as text, with the trivial factors folded."""
    if d == Dim.const(0) or expr == "0":
        return "0"
    factor = f"({expr})" if " " in expr else expr
    if d == Dim.const(1):
        return factor
    return f"{factor} * {dim(d)}"


def f32(value: float) -> str:
    """A ``float`` literal holding ``value`` rounded to float32 (inf and NaN as builtins)."""
    x = np.float32(value)
    if np.isnan(x):
        return '__builtin_nanf("")'
    if np.isinf(x):
        return "__builtin_huge_valf()" if x > 0 else "-__builtin_huge_valf()"
    text = str(x)   # the shortest text that reads back as x
    return text + ("f" if "." in text or "e" in text else ".0f")


def i32(value: int) -> str:
    """An ``int32_t`` literal of ``value`` wrapped to 32 bits."""
    wrapped = (int(value) + 2**31) % 2**32 - 2**31
    return f"int32_t({wrapped})" if wrapped >= -2**31 + 1 else "int32_t(-2147483647 - 1)"

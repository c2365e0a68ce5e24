"""Symbolic dimensions: polynomials over shape symbols with rational coefficients.

The language allows integer-affine dimension expressions (``2*hidden``, ``hidden/2``,
``seq+1``); reshape targets may multiply symbols (``tokens*heads``).  A :class:`Dim` is a
canonical polynomial, so two dimensions are equal exactly when their polynomials are.  Its
printed form is also its MLIR form (the strings in a tensor type's encoding) and parses back.
Symbols are non-negative integers; anonymous symbols made by the front end (the dimensions that
an operation peels off ``...``) are spelled ``$0``, ``$1``... so they never clash with a name a
user can write.
"""
from __future__ import annotations

import re
from fractions import Fraction
from typing import Iterable, Mapping, Union

Monomial = tuple[str, ...]  # sorted symbol names, with repetition for powers


class Dim:
    """An immutable polynomial ``sum(coef * prod(symbols))``."""

    __slots__ = ("terms", "_hash")

    def __init__(self, terms: Mapping[Monomial, Fraction] | None = None) -> None:
        clean = {m: Fraction(c) for m, c in (terms or {}).items() if c != 0}
        self.terms: dict[Monomial, Fraction] = clean
        self._hash = hash(frozenset(clean.items()))

    # construction ---------------------------------------------------------------------------
    @staticmethod
    def const(value: int | Fraction) -> "Dim":
        return Dim({(): Fraction(value)})

    @staticmethod
    def sym(name: str) -> "Dim":
        return Dim({(name,): Fraction(1)})

    @staticmethod
    def of(value: "DimLike") -> "Dim":
        if isinstance(value, Dim):
            return value
        if isinstance(value, int):
            return Dim.const(value)
        return Dim.sym(value)

    # arithmetic -----------------------------------------------------------------------------
    def __add__(self, other: "DimLike") -> "Dim":
        other = Dim.of(other)
        terms = dict(self.terms)
        for m, c in other.terms.items():
            terms[m] = terms.get(m, Fraction(0)) + c
        return Dim(terms)

    __radd__ = __add__

    def __neg__(self) -> "Dim":
        return Dim({m: -c for m, c in self.terms.items()})

    def __sub__(self, other: "DimLike") -> "Dim":
        return self + (-Dim.of(other))

    def __rsub__(self, other: "DimLike") -> "Dim":
        return Dim.of(other) - self

    def __mul__(self, other: "DimLike") -> "Dim":
        other = Dim.of(other)
        terms: dict[Monomial, Fraction] = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in other.terms.items():
                m = tuple(sorted(m1 + m2))
                terms[m] = terms.get(m, Fraction(0)) + c1 * c2
        return Dim(terms)

    __rmul__ = __mul__

    def div(self, k: int) -> "Dim":
        """Exact division by a non-zero integer constant."""
        return Dim({m: c / k for m, c in self.terms.items()})

    # queries --------------------------------------------------------------------------------
    def is_const(self) -> bool:
        return all(m == () for m in self.terms)

    @property
    def value(self) -> int | None:
        """The integer value of a constant dimension, else None."""
        if not self.is_const():
            return None
        c = self.terms.get((), Fraction(0))
        return int(c) if c.denominator == 1 else None

    def symbols(self) -> set[str]:
        return {s for m in self.terms for s in m}

    def is_affine(self) -> bool:
        return all(len(m) <= 1 for m in self.terms)

    def nonneg(self) -> bool | None:
        """True if provably >= 0 for all non-negative symbol values, False if provably < 0,
        None when it depends on the values."""
        const = self.terms.get((), Fraction(0))
        others = [c for m, c in self.terms.items() if m != ()]
        if all(c >= 0 for c in others) and const >= 0:
            return True
        if all(c <= 0 for c in others) and const < 0:
            return False
        return None

    def subst(self, env: Mapping[str, "DimLike"]) -> "Dim":
        out = Dim()
        for m, c in self.terms.items():
            t = Dim.const(c)
            for s in m:
                t = t * (Dim.of(env[s]) if s in env else Dim.sym(s))
            out = out + t
        return out

    def evaluate(self, env: Mapping[str, int]) -> Fraction:
        total = Fraction(0)
        for m, c in self.terms.items():
            t = c
            for s in m:
                t *= env[s]
            total += t
        return total

    def solve_for(self, value: int, known: Mapping[str, int]) -> tuple[str, Fraction] | None:
        """If exactly one symbol is unknown and the dimension is linear in it, the value that
        symbol must take for the dimension to equal ``value``; else None."""
        rest = self.subst(known)
        unknown = rest.symbols()
        if len(unknown) != 1 or not rest.is_affine():
            return None
        (name,) = unknown
        a = rest.terms.get((name,), Fraction(0))
        b = rest.terms.get((), Fraction(0))
        return name, (value - b) / a

    # identity -------------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if isinstance(other, int):
            other = Dim.const(other)
        return isinstance(other, Dim) and self.terms == other.terms

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Dim({str(self)!r})"

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        ordered = sorted(self.terms.items(), key=lambda mc: (-len(mc[0]), mc[0]))
        out = ""
        for i, (m, c) in enumerate(ordered):
            neg = c < 0
            c = abs(c)
            if m == ():
                body = str(c.numerator) if c.denominator == 1 else f"{c.numerator}/{c.denominator}"
            else:
                body = "*".join(m)
                if c.numerator != 1:
                    body = f"{c.numerator}*{body}"
                if c.denominator != 1:
                    body = f"{body}/{c.denominator}"
            if i == 0:
                out = ("-" if neg else "") + body
            else:
                out += ("-" if neg else "+") + body
        return out


DimLike = Union[Dim, int, str]

ELLIPSIS = "..."
"""Marker standing first in a shape for the leading dimensions of a rank-generic function."""

ShapeEntry = Union[Dim, str]  # a Dim, or ELLIPSIS in first position
Shape = tuple  # tuple[ShapeEntry, ...]


def shape_str(shape: Iterable[ShapeEntry]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def has_ellipsis(shape: Shape) -> bool:
    return len(shape) > 0 and shape[0] == ELLIPSIS


def certain(shape: Shape) -> tuple[Dim, ...]:
    """The dimensions after the ellipsis (all of them when there is none)."""
    return tuple(shape[1:]) if has_ellipsis(shape) else tuple(shape)


_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*|\$\d+)|(.))")


def parse_dim(text: str) -> Dim:
    """Parse the printed form of a :class:`Dim` (``+ - * /``, parentheses, integers, symbols).

    Raises ValueError on malformed text; used for tensor encodings read back from MLIR.
    """
    tokens: list[tuple[str, str]] = []
    for num, name, other in _TOKEN.findall(text.strip()):
        if num:
            tokens.append(("num", num))
        elif name:
            tokens.append(("name", name))
        elif other.strip():
            tokens.append(("op", other))
    pos = 0

    def peek() -> tuple[str, str] | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> tuple[str, str]:
        nonlocal pos
        if pos >= len(tokens):
            raise ValueError(f"unexpected end of dimension {text!r}")
        pos += 1
        return tokens[pos - 1]

    def atom() -> Dim:
        kind, val = take()
        if kind == "num":
            return Dim.const(int(val))
        if kind == "name":
            return Dim.sym(val)
        if val == "(":
            d = expr()
            if take() != ("op", ")"):
                raise ValueError(f"unbalanced parenthesis in dimension {text!r}")
            return d
        if val == "-":
            return -atom()
        raise ValueError(f"unexpected {val!r} in dimension {text!r}")

    def term() -> Dim:
        d = atom()
        while peek() in (("op", "*"), ("op", "/")):
            _, op = take()
            rhs = atom()
            if op == "*":
                d = d * rhs
            else:
                if rhs.value is None or rhs.value == 0:
                    raise ValueError(f"division by a non-constant or zero in {text!r}")
                d = d.div(rhs.value)
        return d

    def expr() -> Dim:
        d = term()
        while peek() in (("op", "+"), ("op", "-")):
            _, op = take()
            rhs = term()
            d = d + rhs if op == "+" else d - rhs
        return d

    result = expr()
    if pos != len(tokens):
        raise ValueError(f"trailing text in dimension {text!r}")
    return result

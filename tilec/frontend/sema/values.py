"""The typed value graph that semantic analysis builds, and what every part of it uses:
element type names, "did you mean", and dimension expressions."""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Iterable

from ...diagnostics import Span, TilecError
from ...dialect.types import DTYPE_ALIASES, TensorInfo
from ...dims import Dim
from .. import ast

INT_LIMIT = 2**31 - 1


# --- the typed value graph -------------------------------------------------------------------
@dataclass(eq=False)
class Value:
    """One operation's result.  ``op`` is a tile op name ("exp", "reduce", ...), or "param"
    for a function argument; ``attrs`` holds the op's attributes in Python form."""

    op: str
    operands: list["Value"]
    attrs: dict
    type: TensorInfo
    span: Span
    index: int = -1          # position of a "param"

    @property
    def is_mask(self) -> bool:
        return self.type.dtype == "bool"


@dataclass(eq=False)
class Weak:
    """A number literal whose element type comes from the tensor beside it."""

    value: int | float
    span: Span

    @property
    def is_float(self) -> bool:
        return isinstance(self.value, float)


Operand = Value | Weak


@dataclass
class ParamInfo:
    name: str
    type: TensorInfo
    scalar: bool
    default: int | float | None
    span: Span


@dataclass
class Check:
    """A run-time condition ``lhs rel rhs`` on shape symbols."""

    lhs: Dim
    rel: str                  # "le" | "eq" | "bcast" (lhs == rhs or lhs == 1) | "int" | "i32"
    rhs: Dim
    message: str
    span: Span


@dataclass
class Hint:
    value: Value
    name: str
    level: str
    span: Span


@dataclass
class TypedFunction:
    name: str
    span: Span
    params: list[ParamInfo]
    result_types: list[TensorInfo]
    results: list[Value]      # already converted to the declared element types
    values: list[Value]       # every value in program order (params first)
    symbols: list[str]        # free shape symbols, ABI order
    lead: list[str]           # dims peeled off `...`, or [] ; None when not rank-generic
    rank_generic: bool
    checks: list[Check]
    hints: list[Hint]
    templates: dict[str, list[int]]
    backward: str | None = None    # `#pragma backward(NAME)`
    dtype_template: dict[str, str] | None = None   # {"function": NAME, T: dtype} of an instance
    reversible: list[str] = field(default_factory=list)   # see ExpressionRules._runtime_broadcast
    stretch: list[str] = field(default_factory=list)      # templated at 1 by a broadcast
    variant_of: tuple[str, dict[str, int]] | None = None  # (function, binding) of a variant


@dataclass
class Options:
    defines: dict[str, int] = field(default_factory=dict)
    templates: dict[str, list[int]] = field(default_factory=dict)   # --template overrides
    dtypes: dict[str, str] = field(default_factory=dict)   # -D T=float16 (dtype templates)


class NeedLead(Exception):
    """Internal: an operation needs ``count`` more dimensions peeled off ``...``."""

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.count = count



def element_type(name: str, span: Span) -> str:
    if name in DTYPE_ALIASES:
        return DTYPE_ALIASES[name]
    hint = difflib.get_close_matches(name, list(DTYPE_ALIASES), n=1)
    extra = f" (did you mean '{hint[0]}'?)" if hint else ""
    raise TilecError(f"unknown dtype '{name}'{extra}; expected one of float16, bfloat16, "
                     "float32, int32", span)


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    candidates = list(candidates)
    hint = [c for c in candidates if c.lower() == name.lower()] or \
        difflib.get_close_matches(name, candidates, n=1)
    return f" (did you mean '{hint[0]}'?)" if hint else ""


# --- dimension expressions -------------------------------------------------------------------
def dim_of(expr: ast.Expr, what: str = "dimension") -> Dim:
    """Turn a dimension expression (numbers, symbols, + - * and exact / by a constant)."""
    if isinstance(expr, ast.Num):
        if expr.is_float or not isinstance(expr.value, int):
            raise TilecError(f"a {what} must be an integer, not '{expr.text}'", expr.span)
        if expr.value > INT_LIMIT * INT_LIMIT:
            raise TilecError(f"{what} {expr.text[:20]}... is too large", expr.span)
        return Dim.const(expr.value)
    if isinstance(expr, ast.Name):
        return Dim.sym(expr.id)
    if isinstance(expr, ast.Unary) and expr.op == "-":
        return -dim_of(expr.operand, what)
    if isinstance(expr, ast.BinOp) and expr.op in "+-*/":
        lhs, rhs = dim_of(expr.lhs, what), dim_of(expr.rhs, what)
        if expr.op == "+":
            return lhs + rhs
        if expr.op == "-":
            return lhs - rhs
        if expr.op == "*":
            return lhs * rhs
        if rhs.value is None or rhs.value == 0:
            raise TilecError(f"a {what} may only be divided by a non-zero integer constant",
                             expr.rhs.span)
        return lhs.div(rhs.value)
    if isinstance(expr, ast.EllipsisExpr):
        raise TilecError("'...' may only stand first in a dimension list", expr.span)
    raise TilecError(f"expected a {what} (integers and shape symbols with + - * /)", expr.span)


def symbols_of(f: ast.FuncDef) -> set[str]:
    out: set[str] = set()
    types = [p.type for p in f.params] + list(f.results)
    for t in types:
        if isinstance(t, ast.TensorType):
            for d in t.dims:
                if not isinstance(d, ast.EllipsisExpr):
                    try:
                        out |= dim_of(d).symbols()
                    except TilecError:
                        pass
    return out


def keepdims(arg: "ast.Arg | bool") -> bool:
    """A reduction's ``keepdims=``: its default, or the ``true``/``false`` written."""
    if not isinstance(arg, ast.Arg):
        return arg
    if not isinstance(arg.value, ast.Bool):
        raise TilecError("keepdims must be true or false", arg.value.span)
    return arg.value.value

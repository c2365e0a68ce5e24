"""AST of the ``.tile`` language: what the parser produces and sema consumes.

Every node carries the :class:`~tilec.diagnostics.Span` of its source text.  Dimension
expressions (in types, slices and reshape lists) are ordinary expressions; sema turns them into
:class:`~tilec.dims.Dim` and rejects what is not a dimension.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from ..diagnostics import Span


# --- expressions -----------------------------------------------------------------------------
@dataclass
class Num:
    value: int | float
    text: str            # as written, e.g. "1e-6", "2."
    is_float: bool
    span: Span


@dataclass
class Name:
    id: str
    span: Span


@dataclass
class Bool:
    value: bool
    span: Span


@dataclass
class EllipsisExpr:
    """``...`` in a type's dimension list or a slice."""
    span: Span


@dataclass
class Unary:
    op: str               # "-"
    operand: "Expr"
    span: Span


@dataclass
class BinOp:
    op: str               # + - * / @ < <= > >= == !=
    lhs: "Expr"
    rhs: "Expr"
    span: Span            # the whole expression
    op_span: Span         # the operator token


@dataclass
class Arg:
    name: str | None      # keyword, or None for a positional argument
    value: "Expr"
    span: Span
    name_span: Span | None = None


@dataclass
class Call:
    func: str
    func_span: Span
    args: list[Arg]
    span: Span


@dataclass
class SliceItem:
    """One subscript: ``:`` (start and end None), ``a:b``, ``a:``, ``:b``."""
    start: "Expr | None"
    end: "Expr | None"
    span: Span


@dataclass
class Index:
    base: "Expr"
    items: list[Union[SliceItem, EllipsisExpr]]
    span: Span


@dataclass
class ListExpr:
    items: list["Expr"]
    span: Span


Expr = Union[Num, Name, Bool, EllipsisExpr, Unary, BinOp, Call, Index, ListExpr]


# --- types -----------------------------------------------------------------------------------
@dataclass
class TensorType:
    """``Tensor[dims]`` (dtype None means float16) or ``Tensor<DTYPE>[dims]``."""
    dtype: str | None
    dtype_span: Span | None
    dims: list[Expr]      # Num / Name / BinOp / Unary expressions, EllipsisExpr first at most
    span: Span


@dataclass
class ScalarType:
    """A scalar parameter type: ``float32``, ``float16``, ``bfloat16``, ``int32`` (or an
    unknown name, which sema reports)."""
    dtype: str
    span: Span


TypeExpr = Union[TensorType, ScalarType]


# --- statements and items --------------------------------------------------------------------
@dataclass
class Pragma:
    """``#pragma [acl] NAME(ARGS)``.  ``args`` is None when the text after the name is not a
    parenthesised argument list (possible for unknown pragmas, which are only warned about)."""
    name: str
    name_span: Span
    args: list[Expr] | None
    vendor: str | None
    text: str             # the whole line as written
    span: Span


@dataclass
class Let:
    names: list[Name]     # one name, or several for `let (a, b) = call(...)`
    value: Expr
    destructure: bool
    span: Span


@dataclass
class Return:
    values: list[Expr]
    parenthesized: bool   # `return (a, b);`
    span: Span


Stmt = Union[Let, Return, Pragma]


@dataclass
class Param:
    name: str
    name_span: Span
    type: TypeExpr
    default: Num | None
    span: Span


@dataclass
class FuncDef:
    name: str
    name_span: Span
    params: list[Param]
    results: list[TypeExpr]
    results_parenthesized: bool
    body: list[Stmt]
    span: Span
    close_span: Span      # the closing brace, where "missing return" points


@dataclass
class Module:
    file: str
    items: list[Union[FuncDef, Pragma]] = field(default_factory=list)

    @property
    def functions(self) -> list[FuncDef]:
        return [i for i in self.items if isinstance(i, FuncDef)]

    @property
    def pragmas(self) -> list[Pragma]:
        return [i for i in self.items if isinstance(i, Pragma)]

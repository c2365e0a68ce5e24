"""Readable dump of the AST, for ``tilec FILE --emit=ast``: ast.Module in, text out.

One node per line, indented two spaces per level, ending with its location ``@LINE:COL``.
Types, slices and parameter defaults are shown in source form (``Tensor<f32>[seq, 2*hidden]``,
``0:half``); expressions are shown as trees.  The output depends only on the AST, so FileCheck
tests can match it line by line.
"""
from __future__ import annotations

from pathlib import PurePath

from ..diagnostics import Span
from . import ast

# Binding strength of each operator, loosest first, as in the grammar.
_PRECEDENCE = {"<": 1, "<=": 1, ">": 1, ">=": 1, "==": 1, "!=": 1,
               "+": 2, "-": 2, "*": 3, "/": 3, "@": 4}
_UNARY = 5
_ATOM = 6
_LEAF_KIND = {ast.Num: "Num", ast.Name: "Name", ast.Bool: "Bool", ast.EllipsisExpr: "Ellipsis"}


def format_ast(module: ast.Module) -> str:
    """The indented tree of ``module``, one node per line, ending with a newline."""
    lines = [f"Module {PurePath(module.file).name}"]
    for item in module.items:
        if isinstance(item, ast.FuncDef):
            _func(item, 1, lines)
        else:
            _pragma(item, 1, lines)
    return "\n".join(lines) + "\n"


def format_expr(expr: ast.Expr) -> str:
    """``expr`` in source form, with the parentheses its precedence needs: ``2*(a + 1)``."""
    if isinstance(expr, ast.Num):
        return expr.text
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Bool):
        return "true" if expr.value else "false"
    if isinstance(expr, ast.EllipsisExpr):
        return "..."
    if isinstance(expr, ast.Unary):
        return expr.op + _operand(expr.operand, _UNARY)
    if isinstance(expr, ast.BinOp):
        strength = _PRECEDENCE[expr.op]
        # Left-associative: an equally strong operator needs parentheses on the right only.
        lhs = _operand(expr.lhs, strength)
        rhs = _operand(expr.rhs, strength + 1)
        op = expr.op if expr.op in "*/" else f" {expr.op} "
        return f"{lhs}{op}{rhs}"
    if isinstance(expr, ast.Call):
        return f"{expr.func}({', '.join(_arg(a) for a in expr.args)})"
    if isinstance(expr, ast.Index):
        return f"{_operand(expr.base, _ATOM)}[{', '.join(_subscript(i) for i in expr.items)}]"
    return f"[{', '.join(format_expr(i) for i in expr.items)}]"


def format_type(type_: ast.TypeExpr) -> str:
    """``Tensor<DTYPE>[dims]``, ``Tensor[dims]`` or a scalar type name."""
    if isinstance(type_, ast.ScalarType):
        return type_.dtype
    dtype = "" if type_.dtype is None else f"<{type_.dtype}>"
    return f"Tensor{dtype}[{', '.join(format_expr(d) for d in type_.dims)}]"


def _strength(expr: ast.Expr) -> int:
    if isinstance(expr, ast.BinOp):
        return _PRECEDENCE[expr.op]
    return _UNARY if isinstance(expr, ast.Unary) else _ATOM


def _operand(expr: ast.Expr, at_least: int) -> str:
    text = format_expr(expr)
    return f"({text})" if _strength(expr) < at_least else text


def _arg(arg: ast.Arg) -> str:
    value = format_expr(arg.value)
    return value if arg.name is None else f"{arg.name}={value}"


def _subscript(item: ast.SliceItem | ast.EllipsisExpr) -> str:
    if isinstance(item, ast.EllipsisExpr):
        return "..."
    start = "" if item.start is None else format_expr(item.start)
    end = "" if item.end is None else format_expr(item.end)
    return f"{start}:{end}"


def _line(depth: int, text: str, span: Span, lines: list[str]) -> None:
    lines.append(f"{'  ' * depth}{text} @{span.line}:{span.col}")


def _pragma(pragma: ast.Pragma, depth: int, lines: list[str]) -> None:
    vendor = "" if pragma.vendor is None else f"{pragma.vendor} "
    unparsed = " (unparsed)" if pragma.args is None else ""
    _line(depth, f"Pragma {vendor}{pragma.name}{unparsed}", pragma.span, lines)
    for arg in pragma.args or []:
        _expr(arg, depth + 1, lines)


def _func(func: ast.FuncDef, depth: int, lines: list[str]) -> None:
    _line(depth, f"Func {func.name}", func.name_span, lines)
    for param in func.params:
        default = "" if param.default is None else f" = {param.default.text}"
        _line(depth + 1, f"Param {param.name}: {format_type(param.type)}{default}", param.span,
              lines)
    for result in func.results:
        _line(depth + 1, f"Result {format_type(result)}", result.span, lines)
    for stmt in func.body:
        if isinstance(stmt, ast.Pragma):
            _pragma(stmt, depth + 1, lines)
        elif isinstance(stmt, ast.Let):
            names = ", ".join(n.id for n in stmt.names)
            _line(depth + 1, f"Let ({names})" if stmt.destructure else f"Let {names}", stmt.span,
                  lines)
            _expr(stmt.value, depth + 2, lines)
        else:
            _line(depth + 1, "Return tuple" if stmt.parenthesized else "Return", stmt.span, lines)
            for value in stmt.values:
                _expr(value, depth + 2, lines)


def _expr(expr: ast.Expr, depth: int, lines: list[str]) -> None:
    """``expr`` as a tree: one line per node, operands below it."""
    if isinstance(expr, ast.BinOp):
        _line(depth, f"BinOp {expr.op}", expr.span, lines)
        _expr(expr.lhs, depth + 1, lines)
        _expr(expr.rhs, depth + 1, lines)
    elif isinstance(expr, ast.Unary):
        _line(depth, f"Unary {expr.op}", expr.span, lines)
        _expr(expr.operand, depth + 1, lines)
    elif isinstance(expr, ast.Call):
        _line(depth, f"Call {expr.func}", expr.span, lines)
        for arg in expr.args:
            if arg.name is None:
                _expr(arg.value, depth + 1, lines)
            else:
                _line(depth + 1, f"Kwarg {arg.name}", arg.span, lines)
                _expr(arg.value, depth + 2, lines)
    elif isinstance(expr, ast.Index):
        _line(depth, "Index", expr.span, lines)
        _expr(expr.base, depth + 1, lines)
        for item in expr.items:
            _line(depth + 1, f"Slice {_subscript(item)}", item.span, lines)
    elif isinstance(expr, ast.ListExpr):
        _line(depth, "List", expr.span, lines)
        for item in expr.items:
            _expr(item, depth + 1, lines)
    else:
        _line(depth, f"{_LEAF_KIND[type(expr)]} {format_expr(expr)}", expr.span, lines)

"""Expressions: names, literals, operators, slices; element types, weak literals and
broadcasting."""
from __future__ import annotations

import math
from typing import Callable, Sequence

from ...diagnostics import Span, TilecError
from ...dialect.ops import COMPARE_PREDICATES, UNARY_OPS
from ...dialect.types import TensorInfo
from ...dims import ELLIPSIS, Dim, Shape, has_ellipsis, shape_str
from .. import ast
from .builtins import BUILTINS
from .values import (INT_LIMIT, Check, NeedLead, Operand, Value, Weak, did_you_mean, dim_of,
                     symbols_of)

FLOAT_ONLY_UNARY = set(UNARY_OPS) - {"neg"}
BINOP_NAMES = {"+": "add", "-": "sub", "*": "mul", "/": "div"}
CMP_NAMES = dict(zip(("<", "<=", ">", ">=", "==", "!="), COMPARE_PREDICATES))


def _plain_symbol(d: Dim) -> bool:
    """A dimension that is one user symbol (not a ``$i`` peeled off ``...``)."""
    names = d.symbols()
    return len(names) == 1 and d == Dim.sym(min(names)) and not min(names).startswith("$")


class ExpressionRules:
    """The part of :class:`~.program.FunctionAnalyzer` that analyses expressions."""

    # expressions ---------------------------------------------------------------------------
    def expr(self, e: ast.Expr) -> Operand:
        try:
            return self._expr(e)
        except RecursionError:
            raise TilecError("expression nested too deeply", e.span) from None

    def value(self, e: ast.Expr, what: str = "operand") -> Value:
        """An expression that must be a tensor (weak literals become float32/int32)."""
        v = self.expr(e)
        if isinstance(v, Weak):
            v = self.materialize(v, None)
        return v

    def _expr(self, e: ast.Expr) -> Operand:
        if isinstance(e, ast.Num):
            if e.is_float and not math.isfinite(float(e.value)) and e.text != "inf":
                raise TilecError(f"number {e.text[:20]} is out of range", e.span)
            if not e.is_float and abs(e.value) > 2**63:
                raise TilecError(f"number {e.text[:20]}... is out of range", e.span)
            return Weak(e.value, e.span)
        if isinstance(e, ast.Name):
            if e.id in self.env:
                return self.env[e.id]
            if e.id in BUILTINS or e.id in self.program.functions:
                raise TilecError(f"'{e.id}' is a function; call it as {e.id}(...)", e.span)
            if e.id in symbols_of(self.fdef):
                raise TilecError(f"'{e.id}' is a shape symbol, not a value", e.span)
            raise TilecError(f"unknown name '{e.id}'{did_you_mean(e.id, self.env)}", e.span)
        if isinstance(e, ast.Bool):
            raise TilecError("'true'/'false' may only be given as a keyword argument", e.span)
        if isinstance(e, ast.Unary):
            x = self.expr(e.operand)
            if isinstance(x, Weak):
                return Weak(-x.value, e.span)
            return self.unary("neg", x, e.span, e.operand.span)
        if isinstance(e, ast.BinOp):
            return self._binop(e)
        if isinstance(e, ast.Call):
            return self._call(e)
        if isinstance(e, ast.Index):
            return self._slice(e)
        if isinstance(e, ast.ListExpr):
            raise TilecError("a list is only allowed as an argument (axes=[...], perm=[...], "
                             "reshape(x, [...]))", e.span)
        if isinstance(e, ast.EllipsisExpr):
            raise TilecError("'...' is only allowed in a type's dimensions or in a slice",
                             e.span)
        raise TilecError("unsupported expression", e.span)

    def _binop(self, e: ast.BinOp) -> Operand:
        lhs, rhs = self.expr(e.lhs), self.expr(e.rhs)
        if e.op == "@":
            return self.matmul(self._tensor(lhs, e.lhs.span), self._tensor(rhs, e.rhs.span),
                               e.op_span)
        if isinstance(lhs, Weak) and isinstance(rhs, Weak):
            return self._fold(e, lhs, rhs)
        for v, side in ((lhs, e.lhs), (rhs, e.rhs)):
            if isinstance(v, Value) and v.is_mask:
                raise TilecError("a mask cannot be used in arithmetic or comparisons; use it "
                                 "as the first argument of where(mask, a, b)", side.span)
        if e.op in CMP_NAMES:
            a, b = self.unify_dtypes([lhs, rhs], [e.lhs.span, e.rhs.span], e.op_span)
            shape = self.broadcast_shapes([a, b], e.op_span)
            return self.emit("cmp", self.broadcast_all([a, b], shape),
                             {"predicate": CMP_NAMES[e.op]}, TensorInfo("bool", shape), e.span)
        return self.binary(BINOP_NAMES[e.op], lhs, rhs, e.span, e.op_span,
                           (e.lhs.span, e.rhs.span))

    def _fold(self, e: ast.BinOp, a: Weak, b: Weak) -> Weak:
        if e.op in CMP_NAMES:
            raise TilecError("comparison of two numbers", e.op_span)
        if e.op == "/":
            if b.value == 0:
                raise TilecError("division by zero", e.op_span)
            return Weak(a.value / b.value, e.span)
        fn: Callable = {"+": lambda x, y: x + y, "-": lambda x, y: x - y,
                        "*": lambda x, y: x * y}[e.op]
        return Weak(fn(a.value, b.value), e.span)

    def _tensor(self, v: Operand, span: Span) -> Value:
        if isinstance(v, Weak):
            raise TilecError("expected a tensor, not a number", span)
        if v.is_mask:
            raise TilecError("a mask cannot be used here; use it as the first argument of "
                             "where(mask, a, b)", span)
        return v

    # typing and broadcasting ---------------------------------------------------------------
    def materialize(self, w: Weak, dtype: str | None) -> Value:
        if dtype is None:
            dtype = "float32" if w.is_float else "int32"
        if dtype == "int32":
            if w.is_float and math.isinf(w.value):
                raise TilecError("inf is a float literal; int32 has no infinity (use a "
                                 "float operand, or cast the int32 one to float32)", w.span)
            if w.is_float:
                raise TilecError(f"number {w.value} used with int32 operands must be an "
                                 "integer", w.span)
            if abs(w.value) > INT_LIMIT + 1:
                raise TilecError(f"number {w.value} does not fit int32", w.span)
        return self.emit("constant", [], {"value": w.value if dtype == "int32"
                                          else float(w.value)},
                         TensorInfo(dtype, ()), w.span)

    def unify_dtypes(self, xs: Sequence[Operand], spans: Sequence[Span], at: Span) -> list[Value]:
        typed = [x for x in xs if isinstance(x, Value)]
        if not typed:
            return [self.materialize(x, None) for x in xs]  # type: ignore[arg-type]
        dtype = typed[0].type.dtype
        for x, s in zip(xs, spans):
            if isinstance(x, Value) and x.type.dtype != dtype:
                raise TilecError(f"element types differ: {typed[0].type.dtype} and "
                                 f"{x.type.dtype}; convert one with cast(x, {dtype})", at)
        return [self.materialize(x, dtype) if isinstance(x, Weak) else x for x in xs]

    def broadcast_shapes(self, xs: Sequence[Value], at: Span) -> Shape:
        shapes = [x.type.shape for x in xs if x.type.shape != ()]
        if not shapes:
            return ()
        generic = [s for s in shapes if has_ellipsis(s)]
        fixed_rank = max((len(s) for s in shapes if not has_ellipsis(s)), default=0)
        if generic:
            certain = [len(s) - 1 for s in generic]
            if len(set(certain)) > 1:
                raise TilecError("cannot broadcast rank-generic tensors with different numbers "
                                 "of trailing dimensions: " + " and ".join(
                                     shape_str(s) for s in generic), at)
            if fixed_rank > certain[0]:
                raise NeedLead(fixed_rank - certain[0])
        rank = max(len(s) for s in shapes)
        out: list = []
        for i in range(1, rank + 1):
            entries = [s[-i] for s in shapes if len(s) >= i]
            if ELLIPSIS in entries:
                out.append(ELLIPSIS)
                continue
            dims = list(dict.fromkeys(d for d in entries if d != Dim.const(1)))
            constants = [d for d in dims if d.is_const()]
            if len(dims) > 1 and (len(constants) > 1 or not all(
                    _plain_symbol(d) or d.is_const() for d in dims)):
                raise TilecError("incompatible broadcast: " + " and ".join(
                    shape_str(s) for s in shapes) + f" differ in dimension -{i} (" +
                    " vs ".join(sorted(str(d) for d in dims)) + ")", at)
            out.append(self._runtime_broadcast(dims, i, at) if len(dims) > 1
                       else dims[0] if dims else Dim.const(1))
        return tuple(reversed(out))

    def _runtime_broadcast(self, dims: list[Dim], i: int, at: Span) -> Dim:
        """Different symbols (or symbols and one constant) in one broadcast position (language
        1.1): the result takes the constant, else a symbol the function's declared results
        name, else the first, avoiding symbols that already stretch elsewhere (so that two
        broadcasts of the same symbols agree on the direction); each other one must be equal
        to it or 1 at run time (a ``bcast`` check), and gets a variant where it is 1.  A
        result symbol that no declared result names may be 1 instead (``root.reversible``):
        the function is analysed again with it 1 for that variant."""
        root = self.root
        steady = [d for d in dims if not d.symbols() & root.stretch.keys()]
        result = ([d for d in dims if d.is_const()] +
                  [d for d in steady if d.symbols() & root.result_symbols] + steady + dims)[0]
        reversible = not result.is_const() and not result.symbols() & root.result_symbols
        if reversible:
            root.reversible.setdefault(str(result), at)
        for d in dims:
            if d == result:
                continue
            (sym,) = d.symbols()
            to = f"be {result}" if result.is_const() else \
                f"equal {result} (of {root.symbol_source(str(result))})"
            message = (f"broadcast in dimension -{i}: {sym} (of {root.symbol_source(sym)}) "
                       f"must {to} or be 1")
            if reversible:
                message = (f"broadcast in dimension -{i}: {sym} (of {root.symbol_source(sym)}) "
                           f"and {result} (of {root.symbol_source(str(result))}) must be "
                           "equal or one of them 1")
            if all(c.lhs != d or c.rhs != result or c.rel != "bcast" for c in root.checks):
                root.checks.append(Check(d, "bcast", result, message, self.here(at)))
            root.stretch.setdefault(sym, at)
        return result

    def broadcast_to(self, x: Value, shape: Shape, span: Span) -> Value:
        if x.type.shape == shape or x.type.shape == ():
            return x
        key = (id(x), shape)
        if key not in self.root.broadcasts:   # one broadcast per (value, shape)
            self.root.broadcasts[key] = self.emit("broadcast", [x], {},
                                                  TensorInfo(x.type.dtype, shape), span)
        return self.root.broadcasts[key]

    def broadcast_all(self, xs: Sequence[Value], shape: Shape) -> list[Value]:
        return [self.broadcast_to(x, shape, x.span) for x in xs]

    def unary(self, name: str, x: Operand, span: Span, operand_span: Span | None = None) -> Value:
        x = self._tensor(x, operand_span or span) if isinstance(x, Value) else \
            self.materialize(x, None)
        if x.type.dtype == "int32" and name in FLOAT_ONLY_UNARY:
            raise TilecError(f"{name} needs a floating-point operand, not int32; use "
                             "cast(x, float32)", span)
        return self.emit(name, [x], {}, x.type, span)

    def binary(self, name: str, lhs: Operand, rhs: Operand, span: Span, at: Span,
               spans: tuple[Span, Span]) -> Value:
        for v, s in zip((lhs, rhs), spans):
            if isinstance(v, Value):
                self._tensor(v, s)
        a, b = self.unify_dtypes([lhs, rhs], spans, at)
        if a.type.dtype == "int32" and name in ("div", "pow"):
            op = "/" if name == "div" else "pow"
            raise TilecError(f"'{op}' is not defined on int32; cast to float32 first", at)
        shape = self.broadcast_shapes([a, b], at)
        a, b = self.broadcast_all([a, b], shape)
        return self.emit(name, [a, b], {}, TensorInfo(a.type.dtype, shape), span)

    # slicing -------------------------------------------------------------------------------
    def _slice(self, e: ast.Index) -> Value:
        x = self._tensor(self.value(e.base), e.base.span)
        items = e.items
        ellipses = [i for i, s in enumerate(items) if isinstance(s, ast.EllipsisExpr)]
        if len(ellipses) > 1:
            raise TilecError("'...' may appear at most once in a slice", items[ellipses[1]].span)
        dims = x.type.dims
        if x.type.rank_generic and not ellipses:
            raise TilecError(f"slice of rank-generic {x.type}: start the subscripts with "
                             "'...', e.g. x[..., 0:n]", e.span)
        explicit = len(items) - len(ellipses)
        if ellipses:
            before = items[:ellipses[0]]
            after = items[ellipses[0] + 1:]
            if x.type.rank_generic and before:
                raise TilecError("subscripts before '...' would slice the leading dimensions "
                                 f"of rank-generic {x.type}", before[0].span)
            if x.type.rank_generic and len(after) > len(dims):
                raise NeedLead(len(after) - len(dims))
            if explicit > len(dims):
                raise TilecError(f"{explicit} subscripts for {x.type} of rank {len(dims)}",
                                 e.span)
            full = [None] * (len(dims) - explicit)
            expanded = list(before) + full + list(after)
        else:
            if explicit > len(dims):
                raise TilecError(f"{explicit} subscripts for {x.type} of rank {len(dims)}",
                                 e.span)
            expanded = list(items) + [None] * (len(dims) - explicit)
        starts, ends, out = [], [], []
        for d, s in zip(dims, expanded):
            if s is None:
                starts.append(Dim.const(0))
                ends.append(d)
                out.append(d)
                continue
            start = self._subst_dim(dim_of(s.start, "slice bound"), s.start.span) \
                if s.start is not None else Dim.const(0)
            end = self._subst_dim(dim_of(s.end, "slice bound"), s.end.span) \
                if s.end is not None else d
            start_span = s.start.span if s.start else s.span
            end_span = s.end.span if s.end else s.span
            self.integer(start, start_span, "slice bound")
            self.integer(end, end_span, "slice bound")
            self._bound(Dim.const(0), start, start_span,
                        f"slice out of range: start '{start}' is negative")
            self._bound(start, end, s.span,
                        f"slice out of range: end '{end}' is before start '{start}'")
            self._bound(end, d, end_span,
                        f"slice out of range: end '{end}' exceeds dimension '{d}'")
            starts.append(start)
            ends.append(end)
            out.append(end - start)
        return self.emit("slice", [x], {"starts": starts, "ends": ends},
                         x.type.with_dims(tuple(out)), e.span)

    def integer(self, d: Dim, span: Span, what: str, int32: bool = False) -> None:
        """Dimension ``d`` (``what``) must be an integer, which one that divides symbols
        (``d/2``) may not be, and with ``int32`` fit int32 (an iota's values, a ``dim``):
        decided now for a constant, otherwise checked at run time (relation ``int`` or
        ``i32``)."""
        if d.is_const():
            if int32 and d.value is not None and not -INT_LIMIT - 1 <= d.value <= INT_LIMIT:
                raise TilecError(f"{what} is {d.value}, which does not fit int32", span)
            return
        if not int32 and all(c.denominator == 1 for c in d.terms.values()):
            return
        rel = "i32" if int32 else "int"
        sources = ", ".join(f"{s} of {self.root.symbol_source(s)}" for s in sorted(d.symbols()))
        message = f"{what} '{d}' ({sources}) is not an {'int32' if int32 else 'integer'}"
        if all(c.lhs != d or c.rel != rel for c in self.root.checks):
            self.root.checks.append(Check(d, rel, Dim.const(0), message, self.here(span)))

    def _bound(self, lo: Dim, hi: Dim, span: Span, message: str) -> None:
        """Require lo <= hi: decided now when possible, otherwise checked at run time."""
        ok = (hi - lo).nonneg()
        if ok is False:
            raise TilecError(message, span)
        if ok is None:
            self.root.checks.append(Check(lo, "le", hi, message, self.here(span)))


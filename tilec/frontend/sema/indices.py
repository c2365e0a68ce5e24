"""Built-ins of language 1.1 that make or find indices: ``iota``, ``dim``, ``argmax`` and
``argmin``."""
from __future__ import annotations

from ...diagnostics import Span, TilecError
from ...dialect.types import FLOAT_DTYPES, TensorInfo
from ...dims import Dim
from .. import ast
from .values import Value, dim_of, keepdims

INDEX_BUILTINS: dict[str, tuple[tuple[str, ...], dict]] = {
    "iota": (("shape", "axis", "start"), {"start": 0}),
    "dim": (("expr",), {}),
    "argmax": (("x", "axis", "keepdims"), {"keepdims": True}),
    "argmin": (("x", "axis", "keepdims"), {"keepdims": True}),
}


class IndexRules:
    """The part of :class:`~.program.FunctionAnalyzer` that analyses the index built-ins."""

    def index_builtin(self, e: ast.Call, bound: dict) -> Value:
        if e.func == "iota":
            return self._iota(e, bound)
        if e.func == "dim":
            return self._dim(e, bound["expr"])
        return self._arg_reduce(e, e.func[len("arg"):], bound)

    def _dim_expr(self, expr: ast.Expr, what: str) -> Dim:
        """A dimension expression (integers and shape symbols, maybe negative) with the
        caller's bindings substituted; a value's name in it is an error."""
        for name in _names(expr):
            if name.id in self.env:
                raise TilecError(f"'{name.id}' is a value, not a shape symbol: {what} is a "
                                 "dimension expression (integers and shape symbols with "
                                 "+ - * /)", name.span)
        if isinstance(expr, ast.Num) and expr.is_float:
            raise TilecError(f"{what} must be an integer, not '{expr.text}'", expr.span)
        return self._subst_dim(dim_of(expr, "dimension expression"), expr.span)

    def _dim(self, e: ast.Call, arg: ast.Arg) -> Value:
        if isinstance(arg.value, ast.ListExpr):
            raise TilecError("dim takes one dimension expression, not a list", arg.span)
        d = self._dim_expr(arg.value, "the argument of dim")
        self.integer(d, arg.span, "dim", int32=True)
        if d.value is not None:
            return self.materialize_int(d.value, arg.span)
        return self.emit("dim", [], {"expr": d}, TensorInfo("int32", ()), e.span)

    def materialize_int(self, value: int, span: Span) -> Value:
        return self.emit("constant", [], {"value": int(value)}, TensorInfo("int32", ()), span)

    def _iota(self, e: ast.Call, bound: dict) -> Value:
        shape_arg = bound["shape"]
        if not isinstance(shape_arg.value, ast.ListExpr):
            raise TilecError("iota expects a list of dimensions as its shape, e.g. "
                             "iota([s, t], axis=1)", shape_arg.span)
        if not shape_arg.value.items:
            raise TilecError("iota needs at least one dimension", shape_arg.span)
        for item in shape_arg.value.items:
            for name in _names(item):
                if name.id in self.env:
                    raise TilecError(f"'{name.id}' is a value, not a shape symbol: an iota "
                                     "dimension must be a dimension expression", name.span)
        dims = tuple(self._extent(item, "iota dimension") for item in shape_arg.value.items)
        axis = self._int_arg(bound["axis"], "axis")
        rank = len(dims)
        if not -rank <= axis < rank:
            raise TilecError(f"axis {axis} is out of range for an iota of rank {rank}",
                             bound["axis"].value.span)
        start = bound["start"]
        first = self._dim_expr(start.value, "iota's start") if isinstance(start, ast.Arg) \
            else Dim.const(start)
        at = start.span if isinstance(start, ast.Arg) else e.span
        self.integer(first, at, "iota's start", int32=True)
        self.integer(first + dims[axis % rank] - Dim.const(1), e.span, "iota's last value",
                     int32=True)
        return self.emit("iota", [], {"axis": axis % rank, "start": first},
                         TensorInfo("int32", dims), e.span)

    def _arg_reduce(self, e: ast.Call, kind: str, bound: dict) -> Value:
        x = self._tensor(self.value(bound["x"].value), bound["x"].span)
        if x.type.dtype not in FLOAT_DTYPES:
            raise TilecError(f"{e.func} needs a floating-point operand, not {x.type.dtype}; "
                             "use cast(x, float32)", bound["x"].span)
        axis = self._int_arg(bound["axis"], "axis")
        (ax,) = self._axes(x, [axis], bound["axis"].span)
        keep = keepdims(bound["keepdims"])
        dims = list(x.type.dims)
        dims[ax] = Dim.const(1)
        if not keep:
            del dims[ax]
        return self.emit("arg_reduce", [x], {"kind": kind, "axis": ax, "keepdims": bool(keep)},
                         TensorInfo("int32", x.type.with_dims(tuple(dims)).shape), e.span)


def _names(expr: ast.Expr) -> list[ast.Name]:
    """The names in a dimension-like expression."""
    if isinstance(expr, ast.Name):
        return [expr]
    if isinstance(expr, ast.Unary):
        return _names(expr.operand)
    if isinstance(expr, ast.BinOp):
        return _names(expr.lhs) + _names(expr.rhs)
    return []

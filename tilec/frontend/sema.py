"""Semantic analysis: AST -> typed, inlined value graphs, one per function.

Name resolution (functions and values live in separate namespaces), inlining of calls between
the file's functions, dtype rules, masks, and symbolic shape inference (affine dimensions,
``...``, NumPy broadcasting, slice bounds, reductions, matmul, reshape/concat/transpose).
The output, :class:`TypedFunction`, is a list of :class:`Value` nodes in program order that
irgen turns into tile IR one op per node.  Every mistake is a located :class:`TilecError`.
"""
from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Callable, Iterable, Sequence

from ..diagnostics import DiagnosticSink, Span, TilecError, note
from ..dialect.ops import COMPARE_PREDICATES, UNARY_OPS
from ..dialect.types import DTYPE_ALIASES, FLOAT_DTYPES, TensorInfo
from ..dims import ELLIPSIS, Dim, Shape, has_ellipsis, shape_str
from . import ast

MAX_INLINE_DEPTH = 64
CACHE_LEVELS = ("L1", "L2", "UB", "SHARED")
KNOWN_PRAGMAS = ("cache_hint", "shape_template", "backward")
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
    rel: str                  # "le" | "eq"
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


@dataclass
class Options:
    defines: dict[str, int] = field(default_factory=dict)
    templates: dict[str, list[int]] = field(default_factory=dict)   # --template overrides


class _NeedLead(Exception):
    """Internal: an operation needs ``count`` more dimensions peeled off ``...``."""

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.count = count


# --- built-in signatures ---------------------------------------------------------------------
# name -> (positional parameter names, defaults for keyword parameters)
BUILTINS: dict[str, tuple[tuple[str, ...], dict]] = {
    **{u: (("x",), {}) for u in UNARY_OPS},
    "max": (("a", "b"), {}), "min": (("a", "b"), {}), "pow": (("a", "b"), {}),
    "where": (("mask", "a", "b"), {}),
    "cast": (("x", "dtype"), {}),
    **{f"reduce_{k}": (("x", "axes", "keepdims"), {"keepdims": True})
       for k in ("sum", "mean", "max", "min", "var")},
    "normalize": (("x", "mean", "var", "eps"), {"eps": 1e-5}),
    "softmax": (("x", "axis"), {"axis": -1}),
    "transpose": (("x", "perm"), {}),
    "reshape": (("x", "shape"), {}),
    "matmul": (("a", "b"), {}),
    "concat": ((), {"axis": None}),   # variadic tensors, axis keyword required
}
FLOAT_ONLY_UNARY = set(UNARY_OPS) - {"neg"}
BINOP_NAMES = {"+": "add", "-": "sub", "*": "mul", "/": "div"}
CMP_NAMES = dict(zip(("<", "<=", ">", ">=", "==", "!="), COMPARE_PREDICATES))


def _dtype(name: str, span: Span) -> str:
    if name in DTYPE_ALIASES:
        return DTYPE_ALIASES[name]
    hint = difflib.get_close_matches(name, list(DTYPE_ALIASES), n=1)
    extra = f" (did you mean '{hint[0]}'?)" if hint else ""
    raise TilecError(f"unknown dtype '{name}'{extra}; expected one of float16, bfloat16, "
                     "float32, int32", span)


def _did_you_mean(name: str, candidates: Iterable[str]) -> str:
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


# --- the analyzer ----------------------------------------------------------------------------
class Program:
    """Analyzes a whole file: the function table, file-level pragmas, and each function."""

    def __init__(self, module: ast.Module, options: Options, sink: DiagnosticSink) -> None:
        self.module = module
        self.options = options
        self.sink = sink
        self.functions: dict[str, ast.FuncDef] = {}
        for f in module.functions:
            if f.name in self.functions:
                first = self.functions[f.name]
                raise TilecError(f"function '{f.name}' is defined twice", f.name_span,
                                 [note("first defined here", first.name_span)])
            if f.name in BUILTINS:
                raise TilecError(f"function '{f.name}' has the name of a built-in function",
                                 f.name_span)
            self.functions[f.name] = f
        self.file_pragmas = [p for p in module.pragmas if self._known_pragma(p)]

    def _known_pragma(self, p: ast.Pragma) -> bool:
        if p.name in KNOWN_PRAGMAS:
            return True
        self.sink.warn(f"unknown pragma '{p.name}' is ignored; known pragmas: "
                       + ", ".join(KNOWN_PRAGMAS), p.name_span)
        return False

    def analyze(self) -> list[TypedFunction]:
        self._check_file_pragmas()
        self._check_defines()
        typed = [self.analyze_function(f) for f in self.module.functions]
        by_name = {f.name: f for f in typed}
        for f in typed:
            if f.backward is not None:
                _check_backward(f, by_name[f.backward], self.functions[f.name])
        return typed

    # file-level checks ----------------------------------------------------------------------
    def _check_file_pragmas(self) -> None:
        for p in self.file_pragmas:
            if p.name == "backward":
                raise TilecError("pragma 'backward' belongs inside the body of the function "
                                 "whose gradient it names", p.name_span)
            if p.name == "cache_hint":
                name, _ = _cache_hint_args(p)
                if not any(name in _bound_names(f) for f in self.functions.values()):
                    raise TilecError(f"cache_hint names '{name}', which no function of this "
                                     "file has as a parameter or 'let'", p.args[0].span)
            else:
                sym, _ = _template_args(p)
                if not any(sym in _symbols_of(f) for f in self.functions.values()):
                    raise TilecError(f"shape_template names '{sym}', which is no shape symbol "
                                     "of any function in this file", p.args[0].span)

    def _check_defines(self) -> None:
        everywhere = set().union(*(_symbols_of(f) for f in self.functions.values()))
        for sym in list(self.options.defines) + list(self.options.templates):
            if sym not in everywhere:
                self.sink.warn(f"symbol '{sym}' given on the command line is no shape symbol "
                               "of this file")

    # functions -----------------------------------------------------------------------------
    def analyze_function(self, fdef: ast.FuncDef) -> TypedFunction:
        lead = 0
        while True:
            try:
                return FunctionAnalyzer(self, fdef, lead).run_top()
            except _NeedLead as need:
                lead += need.count
                if lead > 16:
                    raise TilecError("too many dimensions needed from '...'", fdef.name_span)


def _cache_hint_args(p: ast.Pragma) -> tuple[str, str]:
    args = p.args or []
    if len(args) != 2 or not all(isinstance(a, ast.Name) for a in args):
        raise TilecError("cache_hint expects (NAME, LEVEL), e.g. cache_hint(x, L1)", p.span)
    name, level = args[0].id, args[1].id
    if level not in CACHE_LEVELS:
        raise TilecError(f"unknown cache level '{level}'{_did_you_mean(level, CACHE_LEVELS)}; "
                         "expected one of " + ", ".join(CACHE_LEVELS), args[1].span)
    return name, level


def _template_args(p: ast.Pragma) -> tuple[str, list[int]]:
    args = p.args or []
    ok = (len(args) == 2 and isinstance(args[0], ast.Name) and isinstance(args[1], ast.ListExpr)
          and args[1].items
          and all(isinstance(i, ast.Num) and isinstance(i.value, int) for i in args[1].items))
    if not ok:
        raise TilecError("shape_template expects (SYMBOL, [v1, v2, ...]) with positive integers",
                         p.span)
    values = [i.value for i in args[1].items]
    for item in args[1].items:
        if not 0 < item.value <= INT_LIMIT:
            raise TilecError(f"template value {item.text} is out of range", item.span)
    if len(set(values)) != len(values):
        raise TilecError("shape_template lists a value twice", args[1].span)
    return args[0].id, values


def _backward_args(p: ast.Pragma, fdef: ast.FuncDef, functions: dict[str, ast.FuncDef]) -> str:
    """The function ``#pragma backward(NAME)`` inside ``fdef`` names."""
    args = p.args or []
    if len(args) != 1 or not isinstance(args[0], ast.Name):
        raise TilecError("backward expects (FUNCTION), e.g. backward(rmsnorm_backward)", p.span)
    name = args[0].id
    if name == fdef.name:
        raise TilecError(f"'{name}' cannot be its own backward", args[0].span)
    if name not in functions:
        raise TilecError(f"backward names '{name}', which is no function of this file"
                         f"{_did_you_mean(name, list(functions))}", args[0].span)
    return name


def _check_backward(f: TypedFunction, b: TypedFunction, fdef: ast.FuncDef) -> None:
    """``b`` takes ``f``'s parameters, then one gradient per result of ``f``, and returns one
    gradient per tensor parameter of ``f``, each of the dtype of what it is the gradient of."""
    span = next(s.args[0].span for s in fdef.body
                if isinstance(s, ast.Pragma) and s.name == "backward")
    want = [("scalar" if p.scalar else "tensor", p.type.dtype) for p in f.params]
    want += [("tensor", r.dtype) for r in f.result_types]
    got = [("scalar" if p.scalar else "tensor", p.type.dtype) for p in b.params]
    shown = ", ".join(f"{k} {d}" for k, d in want)
    if got != want:
        raise TilecError(f"backward '{b.name}' must take the parameters of '{f.name}' and one "
                         f"gradient per result: ({shown}); it takes ("
                         + ", ".join(f"{k} {d}" for k, d in got) + ")", span)
    grads = [p.type.dtype for p in f.params if not p.scalar]
    if [r.dtype for r in b.result_types] != grads:
        raise TilecError(f"backward '{b.name}' must return one gradient per tensor parameter "
                         f"of '{f.name}': ({', '.join(grads)}); it returns ("
                         + ", ".join(r.dtype for r in b.result_types) + ")", span)


def _bound_names(f: ast.FuncDef) -> set[str]:
    names = {p.name for p in f.params}
    for s in f.body:
        if isinstance(s, ast.Let):
            names.update(n.id for n in s.names)
    return names


def _symbols_of(f: ast.FuncDef) -> set[str]:
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


class FunctionAnalyzer:
    """Evaluates one function body to a value graph.  Calls to the file's functions are
    analyzed by a nested analyzer that appends to the caller's graph (inlining)."""

    def __init__(self, program: Program, fdef: ast.FuncDef, lead: int,
                 parent: "FunctionAnalyzer | None" = None, depth: int = 0) -> None:
        self.program = program
        self.fdef = fdef
        self.depth = depth
        self.parent = parent
        root = parent.root if parent else self
        self.root: FunctionAnalyzer = root
        if parent is None:
            self.values: list[Value] = []
            self.checks: list[Check] = []
            self.hints: list[Hint] = []
            self.broadcasts: dict[tuple[int, Shape], Value] = {}
            self.lead_names = [f"${i}" for i in range(lead)]
        self.env: dict[str, Value] = {}
        self.env_spans: dict[str, Span] = {}
        self.bound: set[str] | None = None      # top level: the symbols the parameters bind
        self.subst: dict[str, Dim] = {}          # this function's symbols -> root dims
        self.prefix: Shape | None = None         # what `...` stands for, in root dims
        self.pragmas = [p for p in program.file_pragmas]
        self.call_sites: tuple[Span, ...] = ()   # the calls this body is inlined through
        self.backward: str | None = None

    # helpers -------------------------------------------------------------------------------
    def here(self, span: Span) -> Span:
        """``span`` of this body, with the calls it is inlined through."""
        return replace(span, inlined_at=self.call_sites) if self.call_sites else span

    def emit(self, op: str, operands: Sequence[Value], attrs: dict, type_: TensorInfo,
             span: Span) -> Value:
        v = Value(op, list(operands), attrs, type_, self.here(span))
        self.root.values.append(v)
        return v

    def type_of(self, t: ast.TypeExpr) -> tuple[TensorInfo, bool]:
        """(type in root dims, is scalar)"""
        if isinstance(t, ast.ScalarType):
            return TensorInfo(_dtype(t.dtype, t.span), ()), True
        dtype = _dtype(t.dtype, t.dtype_span or t.span) if t.dtype else "float16"
        dims: list = []
        for i, d in enumerate(t.dims):
            if isinstance(d, ast.EllipsisExpr):
                if i != 0:
                    raise TilecError("'...' may only stand first in a dimension list", d.span)
                if self.prefix is None:
                    raise TilecError("'...' in a result type needs a parameter with '...'",
                                     d.span)
                dims.extend(self.prefix)
            else:
                dims.append(self._extent(d, "dimension"))
        return TensorInfo(dtype, tuple(dims)), False

    def _extent(self, expr: ast.Expr, what: str) -> Dim:
        """A dimension of a type or a reshape target: never negative."""
        written = dim_of(expr)
        d = self._subst_dim(written, expr.span)
        if d.nonneg() is False:
            given = f" with the symbols given ({d})" if d != written else ""
            raise TilecError(f"{what} '{written}' is negative{given}", expr.span)
        return d

    def _subst_dim(self, d: Dim, span: Span) -> Dim:
        env = dict(self.subst)
        for s in d.symbols():
            if s not in env and self.parent is None and (self.bound is None or s in self.bound):
                env[s] = Dim.sym(s)
        missing = d.symbols() - set(env)
        if missing:
            raise TilecError(f"shape symbol '{sorted(missing)[0]}' is not bound by any parameter",
                             span)
        out = d.subst(env)
        for term in out.terms.values():
            if out.is_const() and term.denominator != 1:
                raise TilecError(f"dimension '{d}' is not an integer with the symbols given "
                                 f"({out})", span)
        return out

    # top level -----------------------------------------------------------------------------
    def run_top(self) -> TypedFunction:
        f = self.fdef
        defines = self.program.options.defines
        self.subst = {k: Dim.const(v) for k, v in defines.items()}
        if any(isinstance(p.type, ast.TensorType) and p.type.dims
               and isinstance(p.type.dims[0], ast.EllipsisExpr) for p in f.params):
            self.prefix = (ELLIPSIS,) + tuple(Dim.sym(n) for n in self.lead_names)
        params = self._declare_params()
        symbols = self._free_symbols(params)
        self.bound = {s for p in params for d in p.type.dims for s in d.symbols()}
        result_types = [self.type_of(t)[0] for t in f.results]
        self._check_bindable(params)
        results = self._run_body(result_types)
        templates = self._templates(symbols)
        return TypedFunction(
            name=f.name, span=f.name_span, params=params, result_types=result_types,
            results=results, values=self.values, symbols=symbols, lead=self.lead_names,
            rank_generic=self.prefix is not None, checks=self.checks, hints=self.hints,
            templates=templates, backward=self.backward)

    def _declare_params(self) -> list[ParamInfo]:
        params = []
        seen: dict[str, Span] = {}
        for i, p in enumerate(self.fdef.params):
            if p.name in seen:
                raise TilecError(f"duplicate parameter '{p.name}'", p.name_span,
                                 [note("first declared here", seen[p.name])])
            seen[p.name] = p.name_span
            t, scalar = self.type_of(p.type)
            default = None
            if p.default is not None:
                if not scalar:
                    raise TilecError("only scalar parameters may have a default",
                                     p.default.span)
                default = self._scalar_default(p.default, t.dtype)
            v = self.emit("param", [], {"name": p.name}, t, p.name_span)
            v.index = i
            self.env[p.name] = v
            self.env_spans[p.name] = p.name_span
            params.append(ParamInfo(p.name, t, scalar, default, p.span))
        return params

    @staticmethod
    def _scalar_default(num: ast.Num, dtype: str) -> int | float:
        if dtype == "int32":
            if num.is_float:
                raise TilecError(f"default {num.text} of an int32 parameter must be an integer",
                                 num.span)
            if abs(num.value) > INT_LIMIT:
                raise TilecError(f"default {num.text[:20]} does not fit int32", num.span)
            return int(num.value)
        value = float(num.value)
        if not math.isfinite(value):
            raise TilecError(f"default {num.text[:20]} is not a finite number", num.span)
        return value

    def _free_symbols(self, params: list[ParamInfo]) -> list[str]:
        order: list[str] = []
        for p in params:
            for d in p.type.dims:
                for term in sorted(d.terms, key=lambda m: m):
                    for s in term:
                        if s not in order and not s.startswith("$"):
                            order.append(s)
        return order

    def _check_bindable(self, params: list[ParamInfo]) -> None:
        """Every free symbol must be recoverable from the parameter shapes at run time."""
        known: set[str] = set()
        dims = [(d, p) for p in params for d in p.type.dims]
        progress = True
        while progress:
            progress = False
            for d, _ in dims:
                unknown = d.symbols() - known
                if len(unknown) == 1 and d.subst({s: 1 for s in known}).is_affine():
                    known |= unknown
                    progress = True
        for d, p in dims:
            if d.symbols() - known:
                raise TilecError(f"cannot bind symbols of dimension '{d}' of parameter "
                                 f"'{p.name}' from shapes: give each symbol a dimension of its "
                                 "own (e.g. Tensor[a, b] rather than Tensor[a*b])", p.span)

    def _templates(self, symbols: list[str]) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        pragmas = self.program.file_pragmas + [s for s in self.fdef.body
                                                if isinstance(s, ast.Pragma)]
        for p in pragmas:
            if p.name != "shape_template":
                continue
            sym, values = _template_args(p)
            if sym in self.program.options.defines:
                continue          # -D on a templated symbol wins: one variant, no dispatch
            if sym not in symbols:
                if p in self.fdef.body:
                    raise TilecError(f"shape_template names '{sym}', which is no shape symbol "
                                     f"of '{self.fdef.name}'", p.args[0].span)
                continue
            out[sym] = values
        for sym, values in self.program.options.templates.items():
            if sym in symbols and sym not in self.program.options.defines:
                out[sym] = values
        return out

    # bodies --------------------------------------------------------------------------------
    def _run_body(self, result_types: list[TensorInfo]) -> list[Value]:
        f = self.fdef
        returned: list[Value] | None = None
        for stmt in f.body:
            if returned is not None and not isinstance(stmt, ast.Pragma):
                raise TilecError("statement after 'return' is never reached", stmt.span)
            if isinstance(stmt, ast.Pragma):
                self._body_pragma(stmt)
            elif isinstance(stmt, ast.Let):
                self._let(stmt)
            else:
                returned = self._return(stmt, result_types)
        if returned is None:
            raise TilecError(f"function '{f.name}' ends without a 'return'", f.close_span)
        self._apply_hints()
        return returned

    def _body_pragma(self, p: ast.Pragma) -> None:
        if not self.program._known_pragma(p):
            return
        if p.name == "backward":
            if self.parent is None:
                if self.backward is not None:
                    raise TilecError("a second pragma 'backward' in this function", p.span)
                self.backward = _backward_args(p, self.fdef, self.program.functions)
            return
        if p.name == "cache_hint":
            name, _ = _cache_hint_args(p)
            if name not in _bound_names(self.fdef):
                raise TilecError(f"cache_hint names '{name}', which is neither a parameter nor "
                                 f"a 'let' of '{self.fdef.name}'", p.args[0].span)
        else:
            _template_args(p)
        self.pragmas.append(p)

    def _apply_hints(self) -> None:
        for p in self.pragmas:
            if p.name != "cache_hint":
                continue
            name, level = _cache_hint_args(p)
            if name in self.env:
                self.root.hints.append(Hint(self.env[name], name, level, p.span))

    def _let(self, stmt: ast.Let) -> None:
        for n in stmt.names:
            if n.id in self.env:
                raise TilecError(f"'{n.id}' is already bound in this function", n.span,
                                 [note("first bound here", self.env_spans[n.id])])
        if stmt.destructure:
            if not isinstance(stmt.value, ast.Call) or stmt.value.func not in \
                    self.program.functions:
                raise TilecError("'let (a, b, ...)' needs a call of a function of this file "
                                 "that returns several results", stmt.value.span)
            values = self._call_user(stmt.value)
            if len(values) != len(stmt.names):
                raise TilecError(f"'{stmt.value.func}' returns {len(values)} result(s), but "
                                 f"{len(stmt.names)} names are bound", stmt.span)
        else:
            v = self.expr(stmt.value)
            if isinstance(v, Weak):
                v = self.materialize(v, None)
            values = [v]
        for n, v in zip(stmt.names, values):
            self.env[n.id] = v
            self.env_spans[n.id] = n.span

    def _return(self, stmt: ast.Return, result_types: list[TensorInfo]) -> list[Value]:
        if len(stmt.values) != len(result_types):
            raise TilecError(f"'{self.fdef.name}' declares {len(result_types)} result(s) but "
                             f"returns {len(stmt.values)}", stmt.span)
        out = []
        for e, want in zip(stmt.values, result_types):
            v = self.expr(e)
            if isinstance(v, Weak):
                v = self.materialize(v, want.dtype)
            if v.is_mask:
                raise TilecError("a mask cannot be returned; use where(mask, a, b)", e.span)
            if v.type.shape != want.shape:
                raise TilecError(f"returned shape {shape_str(v.type.shape)} does not match the "
                                 f"declared {shape_str(want.shape)}", e.span)
            if v.type.dtype != want.dtype:
                v = self.emit("cast", [v], {}, want, e.span)
            out.append(v)
        return out

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
            if e.is_float and not math.isfinite(float(e.value)):
                raise TilecError(f"number {e.text[:20]} is out of range", e.span)
            if not e.is_float and abs(e.value) > 2**63:
                raise TilecError(f"number {e.text[:20]}... is out of range", e.span)
            return Weak(e.value, e.span)
        if isinstance(e, ast.Name):
            if e.id in self.env:
                return self.env[e.id]
            if e.id in BUILTINS or e.id in self.program.functions:
                raise TilecError(f"'{e.id}' is a function; call it as {e.id}(...)", e.span)
            if e.id in _symbols_of(self.fdef):
                raise TilecError(f"'{e.id}' is a shape symbol, not a value", e.span)
            raise TilecError(f"unknown name '{e.id}'{_did_you_mean(e.id, self.env)}", e.span)
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
                raise _NeedLead(fixed_rank - certain[0])
        rank = max(len(s) for s in shapes)
        out: list = []
        for i in range(1, rank + 1):
            entries = [s[-i] for s in shapes if len(s) >= i]
            if ELLIPSIS in entries:
                out.append(ELLIPSIS)
                continue
            dims = {d for d in entries if d != Dim.const(1)}
            if len(dims) > 1:
                raise TilecError("incompatible broadcast: " + " and ".join(
                    shape_str(s) for s in shapes) + f" differ in dimension -{i} (" +
                    " vs ".join(sorted(str(d) for d in dims)) + ")", at)
            out.append(dims.pop() if dims else Dim.const(1))
        return tuple(reversed(out))

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

    # calls ---------------------------------------------------------------------------------
    def _call(self, e: ast.Call) -> Operand:
        if e.func in self.program.functions:
            values = self._call_user(e)
            if len(values) != 1:
                raise TilecError(f"'{e.func}' returns {len(values)} results; bind them with "
                                 f"let (a, b, ...) = {e.func}(...)", e.span)
            return values[0]
        if e.func not in BUILTINS:
            names = list(BUILTINS) + list(self.program.functions)
            raise TilecError(f"unknown function '{e.func}'{_did_you_mean(e.func, names)}",
                             e.func_span)
        return self._builtin(e)

    def _bind_args(self, e: ast.Call, params: Sequence[str],
                   defaults: dict) -> dict[str, ast.Arg | object]:
        """Positional and keyword arguments -> parameter name -> Arg (or the default)."""
        bound: dict = {}
        positional = [a for a in e.args if a.name is None]
        keyword = [a for a in e.args if a.name is not None]
        seen_kw = False
        for a in e.args:
            if a.name is not None:
                seen_kw = True
            elif seen_kw:
                raise TilecError("positional argument after a keyword argument", a.span)
        if len(positional) > len(params):
            raise TilecError(f"{e.func} expects {_count(params, defaults)}, got "
                             f"{len(positional) + len(keyword)}", e.args[len(params)].span)
        for p, a in zip(params, positional):
            bound[p] = a
        for a in keyword:
            if a.name not in params:
                raise TilecError(f"{e.func} has no parameter '{a.name}'"
                                 f"{_did_you_mean(a.name, params)}", a.name_span or a.span)
            if a.name in bound:
                raise TilecError(f"argument '{a.name}' given twice", a.name_span or a.span)
            bound[a.name] = a
        for p in params:
            if p not in bound:
                if p in defaults:
                    bound[p] = defaults[p]
                else:
                    raise TilecError(f"{e.func} expects {_count(params, defaults)}, got "
                                     f"{len(e.args)} (missing '{p}')", e.span)
        return bound

    def _call_user(self, e: ast.Call) -> list[Value]:
        callee = self.program.functions[e.func]
        if self._on_stack(callee):
            raise TilecError(f"recursive call of '{e.func}' cannot be inlined", e.func_span)
        if self.depth >= MAX_INLINE_DEPTH:
            raise TilecError(f"calls nested more than {MAX_INLINE_DEPTH} deep cannot be inlined",
                             e.func_span)
        params = [p.name for p in callee.params]
        defaults = {p.name: p.default for p in callee.params if p.default is not None}
        bound = self._bind_args(e, params, defaults)
        sub = FunctionAnalyzer(self.program, callee, 0, parent=self, depth=self.depth + 1)
        sub.pragmas = list(self.program.file_pragmas)
        sub.call_sites = (replace(e.span, inlined_at=()), *self.call_sites)
        args: list[Operand] = []
        for p in callee.params:
            a = bound[p.name]
            args.append(self.expr(a.value) if isinstance(a, ast.Arg) else
                        Weak(a.value, a.span))
        sub.bind_call(e, args)
        try:
            return sub._run_body(sub.result_types)
        except TilecError as error:   # the callee's body fails for this call's arguments
            if error.span is not None and not error.span.inlined_at:  # else it shows them
                error.diagnostic.notes.append(note(f"in this call of '{e.func}'", e.span))
            raise

    def _on_stack(self, fdef: ast.FuncDef) -> bool:
        a: FunctionAnalyzer | None = self
        while a is not None:
            if a.fdef is fdef:
                return True
            a = a.parent
        return False

    def bind_call(self, call: ast.Call, args: list[Operand]) -> None:
        """Bind the callee's shape symbols (and `...`) from the caller's argument types."""
        f = self.fdef
        self.subst = {k: Dim.const(v) for k, v in self.program.options.defines.items()}
        spans = [a.span for a in call.args] + [call.span] * len(f.params)
        values: list[Value] = []
        for i, (p, a) in enumerate(zip(f.params, args)):
            at = spans[i] if i < len(call.args) else call.span
            if isinstance(p.type, ast.ScalarType):
                dtype = _dtype(p.type.dtype, p.type.span)
                v = self.parent.materialize(a, dtype) if isinstance(a, Weak) else a
                if v.type.shape != ():
                    raise TilecError(f"argument '{p.name}' of '{f.name}' must be a scalar, "
                                     f"got {v.type}", at)
            else:
                v = self.parent._tensor(a, at) if isinstance(a, Value) else \
                    self.parent.materialize(a, None)
                self._unify_param(p, v, at, call)
            if v.type.dtype != self.type_of(p.type)[0].dtype:
                raise TilecError(f"argument '{p.name}' of '{f.name}' must be "
                                 f"{self.type_of(p.type)[0].dtype}, got {v.type.dtype}; use "
                                 "cast", at)
            values.append(v)
        for p, v in zip(f.params, values):
            self.env[p.name] = v
            self.env_spans[p.name] = p.name_span
        self.result_types = [self.type_of(t)[0] for t in f.results]

    def _unify_param(self, p: ast.Param, v: Value, at: Span, call: ast.Call) -> None:
        t = p.type
        assert isinstance(t, ast.TensorType)
        dims = list(t.dims)
        actual = v.type.shape
        if dims and isinstance(dims[0], ast.EllipsisExpr):
            n = len(dims) - 1
            if len(v.type.dims) < n:
                if has_ellipsis(actual):
                    raise _NeedLead(n - len(v.type.dims))
                raise TilecError(f"argument '{p.name}' of '{self.fdef.name}' has rank "
                                 f"{len(actual)}, expected at least {n}", at)
            prefix = actual[:len(actual) - n]
            if self.prefix is not None and self.prefix != prefix:
                raise TilecError(f"argument '{p.name}' of '{self.fdef.name}': leading dimensions "
                                 f"{shape_str(prefix)} differ from {shape_str(self.prefix)} of "
                                 "an earlier '...' argument", at)
            self.prefix = prefix
            dims, actual = dims[1:], actual[len(actual) - n:]
        elif has_ellipsis(actual) or len(actual) != len(dims):
            raise TilecError(f"argument '{p.name}' of '{self.fdef.name}' has shape "
                             f"{shape_str(actual)}, expected rank {len(dims)}", at)
        pending = list(zip(dims, actual))
        progress = True
        while pending and progress:
            progress = False
            for item in list(pending):
                dexpr, got = item
                want = dim_of(dexpr)
                unknown = [s for s in want.symbols() if s not in self.subst]
                if not unknown:
                    have = want.subst(self.subst)
                    if have != got:
                        raise TilecError(self._conflict(p, dexpr, want, have, got), at)
                    pending.remove(item)
                    progress = True
                elif len(unknown) == 1 and want.subst(self.subst).is_affine():
                    rest = want.subst(self.subst)
                    (s,) = unknown
                    a = rest.terms.get((s,), Fraction(0))
                    b = Dim({m: c for m, c in rest.terms.items() if m != (s,)})
                    solution = (got - b) * Dim.const(1 / a)
                    if solution.is_const() and (solution.value is None or solution.value < 0):
                        raise TilecError(f"argument '{p.name}' of '{self.fdef.name}': dimension "
                                         f"{got} does not fit '{want}'", at)
                    self.subst[s] = solution
                    pending.remove(item)
                    progress = True
        if pending:
            raise TilecError(f"cannot bind the symbols of '{pending[0][1]}' for '{p.name}' "
                             f"of '{self.fdef.name}'", at)

    def _conflict(self, p: ast.Param, dexpr: ast.Expr, want: Dim, have: Dim, got) -> str:
        syms = sorted(want.symbols())
        if len(syms) == 1 and want == Dim.sym(syms[0]):
            return (f"symbol '{syms[0]}' of '{self.fdef.name}' is bound to both {have} and "
                    f"{got} (argument '{p.name}')")
        return (f"argument '{p.name}' of '{self.fdef.name}': dimension '{want}' is {have} but "
                f"the argument has {got}")

    # built-ins -----------------------------------------------------------------------------
    def _builtin(self, e: ast.Call) -> Operand:
        name = e.func
        if name == "concat":
            return self._concat(e)
        params, defaults = BUILTINS[name]
        bound = self._bind_args(e, params, defaults)
        arg = lambda p: bound[p]  # noqa: E731
        if name in UNARY_OPS:
            return self.unary(name, self.expr(arg("x").value), e.span, arg("x").span)
        if name in ("max", "min", "pow"):
            a, b = arg("a"), arg("b")
            return self.binary(name, self.expr(a.value), self.expr(b.value), e.span,
                               e.func_span, (a.span, b.span))
        if name == "where":
            return self._where(e, arg("mask"), arg("a"), arg("b"))
        if name == "cast":
            x = self.value(arg("x").value)
            self._tensor(x, arg("x").span)
            d = arg("dtype").value
            if not isinstance(d, ast.Name):
                raise TilecError("cast expects a dtype name as its second argument, e.g. "
                                 "cast(x, float32)", d.span)
            dtype = _dtype(d.id, d.span)
            # a cast is a rounding point even to the same type (x * y rounds to float32 here);
            # tile-canonicalize drops it where the value already has that type exactly
            return self.emit("cast", [x], {}, x.type.with_dtype(dtype), e.span)
        if name.startswith("reduce_"):
            return self._reduce(e, name[len("reduce_"):], bound)
        if name == "normalize":
            return self._normalize(e, bound)
        if name == "softmax":
            x = self._float(self.value(arg("x").value), e, arg("x").span)
            axis = self._int_arg(bound["axis"], "axis")
            (ax,) = self._axes(x, [axis], _span(bound["axis"], e.span))
            return self.emit("softmax", [x], {"axis": ax}, x.type, e.span)
        if name == "transpose":
            return self._transpose(e, bound)
        if name == "reshape":
            return self._reshape(e, bound)
        if name == "matmul":
            a, b = arg("a"), arg("b")
            return self.matmul(self._tensor(self.value(a.value), a.span),
                               self._tensor(self.value(b.value), b.span), e.span)
        raise AssertionError(name)

    def _float(self, x: Value, e: ast.Call, span: Span) -> Value:
        self._tensor(x, span)
        if x.type.dtype not in FLOAT_DTYPES:
            raise TilecError(f"{e.func} needs a floating-point operand, not {x.type.dtype}; "
                             "use cast(x, float32)", span)
        return x

    def _int_arg(self, a, what: str) -> int:
        if not isinstance(a, ast.Arg):
            return a
        v = a.value
        if isinstance(v, ast.Unary) and isinstance(v.operand, ast.Num):
            v = ast.Num(-v.operand.value, "-" + v.operand.text, v.operand.is_float, a.span)
        if not isinstance(v, ast.Num) or v.is_float or abs(v.value) > INT_LIMIT:
            raise TilecError(f"{what} must be an integer", a.value.span)
        return v.value

    def _int_list(self, a, what: str) -> list[tuple[int, Span]]:
        if not isinstance(a, ast.Arg) or not isinstance(a.value, ast.ListExpr):
            span = a.span if isinstance(a, ast.Arg) else None
            raise TilecError(f"{what} must be a list of integers, e.g. [-1]", span)
        out = []
        for item in a.value.items:
            out.append((self._int_arg(ast.Arg(None, item, item.span), what), item.span))
        return out

    def _axes(self, x: Value, axes: list[int], span: Span,
              spans: list[Span] | None = None) -> list[int]:
        """Normalize axes to negative indices, peeling dims off `...` when needed."""
        spans = spans or [span] * len(axes)
        certain = len(x.type.dims)
        out = []
        for ax, s in zip(axes, spans):
            if x.type.rank_generic:
                if ax >= 0:
                    raise TilecError(f"axis {ax} of a rank-generic tensor {x.type}: count from "
                                     "the end with a negative axis", s)
                if -ax > certain:
                    raise _NeedLead(-ax - certain)
                out.append(ax)
            else:
                rank = certain
                if not -rank <= ax < rank:
                    raise TilecError(f"axis {ax} is out of range for {x.type} of rank {rank}",
                                     s)
                out.append(ax - rank if ax >= 0 else ax)
        if len(set(out)) != len(out):
            raise TilecError("an axis is given twice", span)
        return sorted(out)

    def _reduce(self, e: ast.Call, kind: str, bound: dict) -> Value:
        x = self._float(self.value(bound["x"].value), e, bound["x"].span)
        items = self._int_list(bound["axes"], "axes")
        if not items:
            raise TilecError("axes must not be empty", bound["axes"].span)
        axes = self._axes(x, [a for a, _ in items], bound["axes"].span, [s for _, s in items])
        keep = bound["keepdims"]
        if isinstance(keep, ast.Arg):
            if not isinstance(keep.value, ast.Bool):
                raise TilecError("keepdims must be true or false", keep.value.span)
            keep = keep.value.value
        dims = list(x.type.dims)
        for ax in axes:
            dims[ax] = Dim.const(1)
        if not keep:
            dims = [d for i, d in enumerate(dims) if i - len(dims) not in axes]
        return self.emit("reduce", [x], {"kind": kind, "axes": axes, "keepdims": bool(keep)},
                         x.type.with_dims(tuple(dims)), e.span)

    def _normalize(self, e: ast.Call, bound: dict) -> Value:
        """normalize(x, mean, var, eps) = (x - mean) * rsqrt(var + eps)."""
        x, mean, var = (self.expr(bound[n].value) for n in ("x", "mean", "var"))
        eps_arg = bound["eps"]
        eps = self.expr(eps_arg.value) if isinstance(eps_arg, ast.Arg) else Weak(eps_arg, e.span)
        sp = lambda n: bound[n].span  # noqa: E731
        centered = self.binary("sub", x, mean, e.span, e.func_span, (sp("x"), sp("mean")))
        shifted = self.binary("add", var, eps, e.span, e.func_span, (sp("var"), e.span))
        scale = self.unary("rsqrt", shifted, e.span)
        return self.binary("mul", centered, scale, e.span, e.func_span, (e.span, e.span))

    def _where(self, e: ast.Call, m: ast.Arg, a: ast.Arg, b: ast.Arg) -> Value:
        mask = self.expr(m.value)
        if not isinstance(mask, Value) or not mask.is_mask:
            raise TilecError("the first argument of where must be a mask (a comparison such "
                             "as x > 0.0)", m.span)
        x, y = self.expr(a.value), self.expr(b.value)
        for v, s in ((x, a.span), (y, b.span)):
            if isinstance(v, Value):
                self._tensor(v, s)
        x, y = self.unify_dtypes([x, y], [a.span, b.span], e.func_span)
        shape = self.broadcast_shapes([mask, x, y], e.func_span)
        mask, x, y = self.broadcast_all([mask, x, y], shape)
        return self.emit("select", [mask, x, y], {}, TensorInfo(x.type.dtype, shape), e.span)

    def _transpose(self, e: ast.Call, bound: dict) -> Value:
        x = self._tensor(self.value(bound["x"].value), bound["x"].span)
        if x.type.rank_generic:
            raise TilecError(f"transpose needs a tensor of known rank, got {x.type}", e.span)
        perm = [p for p, _ in self._int_list(bound["perm"], "perm")]
        rank = len(x.type.dims)
        if sorted(perm) != list(range(rank)):
            raise TilecError(f"perm {perm} is not a permutation of the {rank} axes of "
                             f"{x.type}", bound["perm"].span)
        dims = tuple(x.type.dims[p] for p in perm)
        return self.emit("transpose", [x], {"perm": perm}, x.type.with_dims(dims), e.span)

    def _reshape(self, e: ast.Call, bound: dict) -> Value:
        x = self._tensor(self.value(bound["x"].value), bound["x"].span)
        if x.type.rank_generic:
            raise TilecError(f"reshape needs a tensor of known rank, got {x.type}", e.span)
        shape_arg = bound["shape"]
        if not isinstance(shape_arg.value, ast.ListExpr):
            raise TilecError("reshape expects a list of dimensions, e.g. [tokens, 1, half]",
                             shape_arg.span)
        dims = []
        for item in shape_arg.value.items:
            if isinstance(item, ast.Unary) and isinstance(item.operand, ast.Num):
                raise TilecError("reshape dimensions must be non-negative (no -1: give every "
                                 "dimension)", item.span)
            dims.append(self._extent(item, "reshape dimension"))
        before = _product(x.type.dims)
        after = _product(dims)
        if before != after:
            if (before - after).is_const():
                raise TilecError(f"reshape changes the number of elements: {before} to "
                                 f"{after}", shape_arg.span)
            self.root.checks.append(Check(before, "eq", after,
                                          f"reshape of {before} elements to {after}",
                                          self.here(e.span)))
        return self.emit("reshape", [x], {}, TensorInfo(x.type.dtype, tuple(dims)), e.span)

    def _concat(self, e: ast.Call) -> Value:
        tensors = [a for a in e.args if a.name is None]
        kws = {a.name: a for a in e.args if a.name is not None}
        for k, a in kws.items():
            if k != "axis":
                raise TilecError(f"concat has no parameter '{k}'", a.name_span or a.span)
        if "axis" not in kws:
            raise TilecError("concat needs axis=k", e.span)
        if len(tensors) < 2:
            raise TilecError("concat needs at least two tensors", e.span)
        xs = [self.expr(a.value) for a in tensors]
        xs = self.unify_dtypes(xs, [a.span for a in tensors], e.func_span)
        for x, a in zip(xs, tensors):
            self._tensor(x, a.span)
        axis = self._int_arg(kws["axis"], "axis")
        first = xs[0]
        (ax,) = self._axes(first, [axis], kws["axis"].span)
        for x, a in zip(xs, tensors):
            same_rank = (x.type.rank_generic == first.type.rank_generic
                         and len(x.type.dims) == len(first.type.dims))
            if x.type.shape == () or not same_rank:
                raise TilecError(f"concat operands must have the same rank: {first.type} and "
                                 f"{x.type}", a.span)
            for i, (d0, d1) in enumerate(zip(first.type.dims, x.type.dims)):
                if i - len(first.type.dims) != ax and d0 != d1:
                    raise TilecError(f"concat operands differ outside axis {axis}: "
                                     f"{first.type} and {x.type}", a.span)
        out = xs[0]
        for x in xs[1:]:   # a chain of binary concats
            dims = list(out.type.dims)
            dims[ax] = dims[ax] + x.type.dims[ax]
            out = self.emit("concat", [out, x], {"axis": ax},
                            first.type.with_dims(tuple(dims)), e.span)
        return out

    def matmul(self, a: Value, b: Value, span: Span) -> Value:
        if a.type.dtype != b.type.dtype:
            raise TilecError(f"element types differ: {a.type.dtype} and {b.type.dtype}; "
                             f"convert one with cast(x, {a.type.dtype})", span)
        if a.type.dtype not in FLOAT_DTYPES:
            raise TilecError(f"matmul needs floating-point operands, not {a.type.dtype}", span)
        for x in (a, b):
            if len(x.type.dims) < 2:
                if x.type.rank_generic:
                    raise _NeedLead(2 - len(x.type.dims))
                raise TilecError(f"matmul needs operands of rank 2 or more, got {x.type}", span)
        m, k1 = a.type.dims[-2:]
        k2, n = b.type.dims[-2:]
        if k1 != k2:
            raise TilecError(f"matmul contraction dimensions differ: {a.type} @ {b.type} "
                             f"({k1} vs {k2})", span)
        batch_a = a.type.shape[:-2]
        batch_b = b.type.shape[:-2]
        batch = self._broadcast_batch(batch_a, batch_b, span)
        a = self.broadcast_to(a, batch + (m, k1), a.span)
        b = self.broadcast_to(b, batch + (k2, n), b.span)
        return self.emit("matmul", [a, b], {}, TensorInfo(a.type.dtype, batch + (m, n)), span)

    def _broadcast_batch(self, x: Shape, y: Shape, span: Span) -> Shape:
        fake = [Value("param", [], {}, TensorInfo("float32", s), span) for s in (x, y)]
        return self.broadcast_shapes(fake, span)

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
                raise _NeedLead(len(after) - len(dims))
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

    def _bound(self, lo: Dim, hi: Dim, span: Span, message: str) -> None:
        """Require lo <= hi: decided now when possible, otherwise checked at run time."""
        ok = (hi - lo).nonneg()
        if ok is False:
            raise TilecError(message, span)
        if ok is None:
            self.root.checks.append(Check(lo, "le", hi, message, self.here(span)))


def _count(params: Sequence[str], defaults: dict) -> str:
    required = len([p for p in params if p not in defaults])
    total = len(params)
    if required == total:
        return f"{total} argument{'s' if total != 1 else ''}"
    return f"{required} to {total} arguments"


def _span(a, fallback: Span) -> Span:
    return a.span if isinstance(a, ast.Arg) else fallback


def _product(dims: Iterable[Dim]) -> Dim:
    out = Dim.const(1)
    for d in dims:
        out = out * d
    return out


def analyze(module: ast.Module, options: Options | None = None,
            sink: DiagnosticSink | None = None) -> list[TypedFunction]:
    """Analyze a parsed file; raises TilecError at the first mistake."""
    return Program(module, options or Options(), sink or DiagnosticSink()).analyze()

"""The program and its functions: the function table, pragmas, parameters, shape symbols and
templates, and function bodies (let, return), analysed by one :class:`FunctionAnalyzer` per
function and per inlined call."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

from ...diagnostics import DiagnosticSink, Span, TilecError, note
from ...dialect.types import TensorInfo
from ...dims import ELLIPSIS, Dim, Shape, shape_str
from .. import ast
from .builtins import BUILTINS, BuiltinRules
from . import dtypes
from .calls import CallRules
from .indices import IndexRules
from .expressions import ExpressionRules
from .values import (INT_LIMIT, Check, Hint, NeedLead, Options, ParamInfo, TypedFunction, Value,
                     Weak, did_you_mean, dim_of, element_type, symbols_of)

CACHE_LEVELS = ("L1", "L2", "UB", "SHARED")
KNOWN_PRAGMAS = ("cache_hint", "shape_template", "backward", "dtype_template")


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
        self.file_pragmas = [p for p in module.pragmas if self._known_pragma(p)
                             and p.name != dtypes.PRAGMA]
        self.dtype_templates: dict[str, dtypes.DtypeTemplate] = {}
        self.dtype_env: dict[str, str] = {}      # the dtype templates' dtypes being analysed

    def _known_pragma(self, p: ast.Pragma) -> bool:
        if p.name in KNOWN_PRAGMAS:
            return True
        self.sink.warn(f"unknown pragma '{p.name}' is ignored; known pragmas: "
                       + ", ".join(KNOWN_PRAGMAS), p.name_span)
        return False

    def analyze(self) -> list[TypedFunction]:
        self._check_file_pragmas()
        self._check_defines()
        typed = self._analyze_instances()
        by_name = {f.name: f for f in typed}
        for f in typed:
            if f.backward is not None:
                source = f.dtype_template["function"] if f.dtype_template else f.name
                _check_backward(f, by_name[f.backward], self.functions[source])
        return typed

    def _analyze_instances(self) -> list[TypedFunction]:
        """Every function, once per dtype of the dtype template it uses (``NAME__DTYPE``)."""
        inside = [s for f in self.module.functions for s in f.body
                  if isinstance(s, ast.Pragma) and s.name == dtypes.PRAGMA]
        self.dtype_templates = dtypes.collect(self.module, inside)
        dtypes.check_defines(self.dtype_templates, self.options.dtypes)
        plan = [(f, dtypes.instances(f, self.dtype_templates, self.options.dtypes))
                for f in self.module.functions]
        grouped = {f.name for f, insts in plan if insts[0].group}
        typed = []
        for f, insts in plan:
            for inst in insts:
                if inst.group and inst.name in self.functions:
                    raise TilecError(f"instance '{inst.name}' of dtype template "
                                     f"{', '.join(inst.binding)} has the name of another "
                                     "function", self.functions[inst.name].name_span)
                self.dtype_env = inst.binding
                fn = self.analyze_function(f)
                fn.name = inst.name
                if inst.group:
                    fn.dtype_template = {"function": inst.group, **inst.binding}
                if fn.backward in grouped:
                    fn.backward = _backward_instance(fn, f, inst)
                typed.append(fn)
                typed.extend(self._reversed(f, fn))
        self.dtype_env = {}
        return typed

    def _reversed(self, fdef: ast.FuncDef, fn: TypedFunction) -> list[TypedFunction]:
        """The variants of ``fn`` where a run-time broadcast's result symbol is 1, so that
        the other side is the result (language 1.1: equal, or either one 1): ``fdef``
        analysed again with that symbol 1, as ``-D`` would give it, under ``fn``'s ABI."""
        out = []
        for sym in fn.reversible:
            variant = self.analyze_function(fdef, {sym: 1})
            variant.name = f"{fn.name}__{sym}_1"
            if variant.name in self.functions:
                raise TilecError(f"variant '{variant.name}' of '{fn.name}' has the name of "
                                 "another function", self.functions[variant.name].name_span)
            variant.symbols = fn.symbols
            variant.variant_of = (fn.name, {sym: 1})
            variant.backward = None     # the function's entry has one, not its variants
            out.append(variant)
        return out

    def dtype(self, name: str, span: Span) -> str:
        """The element type a type or ``cast`` names: a dtype, or a dtype template's."""
        if name in self.dtype_env:
            return self.dtype_env[name]
        if name in self.dtype_templates:
            raise TilecError(f"dtype template '{name}' has no dtype here: a function that does "
                             f"not use {name} calls one that does", span)
        return element_type(name, span)

    # file-level checks ----------------------------------------------------------------------
    def _check_file_pragmas(self) -> None:
        for p in self.file_pragmas:
            if p.name == "backward":
                raise TilecError("pragma 'backward' belongs inside the body of the function "
                                 "whose gradient it names", p.name_span)
            if p.name == "cache_hint":
                name, _ = cache_hint_args(p)
                if not any(name in bound_names(f) for f in self.functions.values()):
                    raise TilecError(f"cache_hint names '{name}', which no function of this "
                                     "file has as a parameter or 'let'", p.args[0].span)
            else:
                sym, _ = template_args(p)
                if not any(sym in symbols_of(f) for f in self.functions.values()):
                    raise TilecError(f"shape_template names '{sym}', which is no shape symbol "
                                     "of any function in this file", p.args[0].span)

    def _check_defines(self) -> None:
        everywhere = set().union(*(symbols_of(f) for f in self.functions.values()))
        for sym in list(self.options.defines) + list(self.options.templates):
            if sym not in everywhere:
                self.sink.warn(f"symbol '{sym}' given on the command line is no shape symbol "
                               "of this file")

    # functions -----------------------------------------------------------------------------
    def analyze_function(self, fdef: ast.FuncDef,
                         fixed: dict[str, int] | None = None) -> TypedFunction:
        lead = 0
        while True:
            try:
                return FunctionAnalyzer(self, fdef, lead, fixed=fixed).run_top()
            except NeedLead as need:
                lead += need.count
                if lead > 16:
                    raise TilecError("too many dimensions needed from '...'", fdef.name_span)


def cache_hint_args(p: ast.Pragma) -> tuple[str, str]:
    args = p.args or []
    if len(args) != 2 or not all(isinstance(a, ast.Name) for a in args):
        raise TilecError("cache_hint expects (NAME, LEVEL), e.g. cache_hint(x, L1)", p.span)
    name, level = args[0].id, args[1].id
    if level not in CACHE_LEVELS:
        raise TilecError(f"unknown cache level '{level}'{did_you_mean(level, CACHE_LEVELS)}; "
                         "expected one of " + ", ".join(CACHE_LEVELS), args[1].span)
    return name, level


def template_args(p: ast.Pragma) -> tuple[str, list[int]]:
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
                         f"{did_you_mean(name, list(functions))}", args[0].span)
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


def _backward_instance(fn: TypedFunction, fdef: ast.FuncDef, inst: dtypes.Instance) -> str:
    """The instance of ``fn``'s backward (a dtype template's function) that ``fn`` names."""
    if not inst.group:
        span = next(s.args[0].span for s in fdef.body
                    if isinstance(s, ast.Pragma) and s.name == "backward")
        raise TilecError(f"backward '{fn.backward}' uses a dtype template, so '{fdef.name}' "
                         "must use it too (one backward per dtype)", span)
    return f"{fn.backward}__{next(iter(inst.binding.values()))}"


def _names_in(e: ast.Expr) -> set[str]:
    try:
        return dim_of(e).symbols()
    except TilecError:
        return set()


def bound_names(f: ast.FuncDef) -> set[str]:
    names = {p.name for p in f.params}
    for s in f.body:
        if isinstance(s, ast.Let):
            names.update(n.id for n in s.names)
    return names


class FunctionAnalyzer(ExpressionRules, CallRules, BuiltinRules, IndexRules):
    """Evaluates one function body to a value graph.  Calls to the file's functions are
    analyzed by a nested analyzer that appends to the caller's graph (inlining)."""

    def __init__(self, program: Program, fdef: ast.FuncDef, lead: int,
                 parent: "FunctionAnalyzer | None" = None, depth: int = 0,
                 fixed: dict[str, int] | None = None) -> None:
        self.program = program
        self.fdef = fdef
        self.fixed = fixed or {}     # symbols given a value for one variant, as -D gives
        self.depth = depth
        self.parent = parent
        root = parent.root if parent else self
        self.root: FunctionAnalyzer = root
        if parent is None:
            self.values: list[Value] = []
            self.checks: list[Check] = []
            self.hints: list[Hint] = []
            self.broadcasts: dict[tuple[int, Shape], Value] = {}
            self.stretch: dict[str, Span] = {}    # symbols broadcast at run time (maybe 1)
            self.reversible: dict[str, Span] = {}  # run-time broadcast results that may be 1
            self.result_symbols: set[str] = set()
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

    def dtype(self, name: str, span: Span) -> str:
        """The element type that ``name`` stands for here (a dtype template's, bound)."""
        return self.program.dtype(name, self.here(span))

    def type_of(self, t: ast.TypeExpr) -> tuple[TensorInfo, bool]:
        """(type in root dims, is scalar)"""
        if isinstance(t, ast.ScalarType):
            return TensorInfo(self.dtype(t.dtype, t.span), ()), True
        dtype = self.dtype(t.dtype, t.dtype_span or t.span) if t.dtype else "float16"
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
        defines = {**self.program.options.defines, **self.fixed}
        self.subst = {k: Dim.const(v) for k, v in defines.items()}
        if any(isinstance(p.type, ast.TensorType) and p.type.dims
               and isinstance(p.type.dims[0], ast.EllipsisExpr) for p in f.params):
            self.prefix = (ELLIPSIS,) + tuple(Dim.sym(n) for n in self.lead_names)
        params = self._declare_params()
        symbols = self._free_symbols(params)
        self.bound = {s for p in params for d in p.type.dims for s in d.symbols()}
        result_types = [self.type_of(t)[0] for t in f.results]
        self.result_symbols = {s for r in result_types for d in r.dims for s in d.symbols()}
        self._check_bindable(params)
        results = self._run_body(result_types)
        templates = self._templates(symbols)
        return TypedFunction(
            name=f.name, span=f.name_span, params=params, result_types=result_types,
            results=results, values=self.values, symbols=symbols, lead=self.lead_names,
            rank_generic=self.prefix is not None, checks=self.checks, hints=self.hints,
            templates=templates, backward=self.backward, reversible=list(self.reversible),
            stretch=[s for s in self.stretch if s in templates])

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
            if num.text.endswith("inf"):
                raise TilecError(f"default {num.text} of an int32 parameter: inf is a float "
                                 "literal, and int32 has no infinity", num.span)
            if num.is_float:
                raise TilecError(f"default {num.text} of an int32 parameter must be an integer",
                                 num.span)
            if abs(num.value) > INT_LIMIT:
                raise TilecError(f"default {num.text[:20]} does not fit int32", num.span)
            return int(num.value)
        value = float(num.value)
        if not math.isfinite(value) and not num.text.endswith("inf"):
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
            sym, values = template_args(p)
            if sym in self.program.options.defines or sym in self.fixed:
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
        for sym in self.stretch:      # a symbol broadcast at run time gets its variant at 1
            out[sym] = sorted(set(out.get(sym, [])) | {1})
        return out

    def symbol_source(self, sym: str) -> str:
        """How a message names where a shape symbol comes from: its first parameter."""
        for p in self.fdef.params:
            if isinstance(p.type, ast.TensorType) and any(
                    not isinstance(d, ast.EllipsisExpr) and sym in _names_in(d)
                    for d in p.type.dims):
                return f"'{p.name}'"
        return "the arguments"

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
        if p.name == dtypes.PRAGMA:
            return
        if p.name == "cache_hint":
            name, _ = cache_hint_args(p)
            if name not in bound_names(self.fdef):
                raise TilecError(f"cache_hint names '{name}', which is neither a parameter nor "
                                 f"a 'let' of '{self.fdef.name}'", p.args[0].span)
        else:
            template_args(p)
        self.pragmas.append(p)

    def _apply_hints(self) -> None:
        for p in self.pragmas:
            if p.name != "cache_hint":
                continue
            name, level = cache_hint_args(p)
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
            # a called function's return rounds to its declared type even where the type does
            # not change (language.md, numerical contract): the inlined body ends in a cast
            if v.type.dtype != want.dtype or self.parent is not None:
                v = self.emit("cast", [v], {}, want, e.span)
            out.append(v)
        return out


def analyze(module: ast.Module, options: Options | None = None,
            sink: DiagnosticSink | None = None) -> list[TypedFunction]:
    """Analyze a parsed file; raises TilecError at the first mistake."""
    return Program(module, options or Options(), sink or DiagnosticSink()).analyze()

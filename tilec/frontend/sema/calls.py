"""Calls of the file's own functions, inlined: argument binding, recursion and depth limits,
and the callee's shape symbols (and ``...``) bound from the caller's argument types."""
from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import TYPE_CHECKING, Sequence

from ...diagnostics import Span, TilecError, note
from ...dims import Dim, has_ellipsis, shape_str
from .. import ast
from .builtins import BUILTINS
from .values import NeedLead, Operand, Value, Weak, did_you_mean, dim_of

if TYPE_CHECKING:
    from .program import FunctionAnalyzer

MAX_INLINE_DEPTH = 64


class CallRules:
    """The part of :class:`~.program.FunctionAnalyzer` that analyses calls and inlines them."""

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
            raise TilecError(f"unknown function '{e.func}'{did_you_mean(e.func, names)}",
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
                                 f"{did_you_mean(a.name, params)}", a.name_span or a.span)
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
        sub = type(self)(self.program, callee, 0, parent=self, depth=self.depth + 1)
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
                dtype = self.dtype(p.type.dtype, p.type.span)
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
                    raise NeedLead(n - len(v.type.dims))
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


def _count(params: Sequence[str], defaults: dict) -> str:
    required = len([p for p in params if p not in defaults])
    total = len(params)
    if required == total:
        return f"{total} argument{'s' if total != 1 else ''}"
    return f"{required} to {total} arguments"


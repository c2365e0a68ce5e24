"""``#pragma dtype_template(T, [float16, bfloat16, float32])`` (language 1.1): the functions
after it that use ``T`` (``Tensor<T>``, a scalar ``eps: T``, ``cast(x, T)``) are analysed once
per listed dtype, as ``NAME__float16``, ``NAME__bfloat16``...; ``-D T=float16`` keeps one
dtype, under the plain ``NAME``.  This module finds the templates, checks them (located
diagnostics) and says which instances each function has; :class:`~.program.Program` analyses
them with ``T`` bound."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterator

from ...diagnostics import Span, TilecError, note
from ...dialect.types import DTYPE_ALIASES
from .. import ast
from .values import did_you_mean, element_type, symbols_of

PRAGMA = "dtype_template"


@dataclass(frozen=True)
class DtypeTemplate:
    name: str
    dtypes: tuple[str, ...]        # canonical names, in the pragma's order
    pragma: ast.Pragma

    @property
    def span(self) -> Span:
        return self.pragma.args[0].span      # type: ignore[index]


@dataclass(frozen=True)
class Instance:
    """One analysis of a function: ``name`` with ``binding`` (template -> dtype); ``group``
    is the function's own name where it has instances of several dtypes, else None."""

    name: str
    binding: dict[str, str]
    group: str | None = None


def _args(p: ast.Pragma) -> tuple[str, list[ast.Name]]:
    args = p.args or []
    ok = (len(args) == 2 and isinstance(args[0], ast.Name) and isinstance(args[1], ast.ListExpr)
          and args[1].items and all(isinstance(i, ast.Name) for i in args[1].items))
    if not ok:
        raise TilecError("dtype_template expects (NAME, [dtype, ...]), e.g. "
                         "dtype_template(T, [float16, bfloat16, float32])", p.span)
    return args[0].id, list(args[1].items)   # type: ignore[arg-type]


def _template(p: ast.Pragma) -> DtypeTemplate:
    name, items = _args(p)
    if name in DTYPE_ALIASES:
        raise TilecError(f"dtype_template cannot name '{name}', a dtype", p.args[0].span)
    dtypes: list[str] = []
    for item in items:
        dtype = element_type(item.id, item.span)
        if dtype in dtypes:
            raise TilecError(f"dtype_template lists {dtype} twice", item.span)
        dtypes.append(dtype)
    return DtypeTemplate(name, tuple(dtypes), p)


def _nodes(node: Any) -> Iterator[Any]:
    """Every AST node under ``node`` (itself included)."""
    yield node
    if dataclasses.is_dataclass(node):
        for f in dataclasses.fields(node):
            yield from _nodes(getattr(node, f.name))
    elif isinstance(node, list):
        for item in node:
            yield from _nodes(item)


def uses(f: ast.FuncDef, name: str) -> bool:
    """Whether ``f`` names ``name`` as a dtype or a value anywhere (its types, its body)."""
    for n in _nodes(f):
        if isinstance(n, (ast.TensorType, ast.ScalarType)) and n.dtype == name:
            return True
        if isinstance(n, ast.Name) and n.id == name:
            return True
    return False


def collect(module: ast.Module, body_pragmas: list[ast.Pragma]) -> dict[str, DtypeTemplate]:
    """The file's dtype templates, checked: a known dtype list, used by a function after the
    pragma and never before it, no clash with a shape symbol or a parameter."""
    if body_pragmas:
        raise TilecError("pragma 'dtype_template' belongs at file level, before the functions "
                         "that use it", body_pragmas[0].name_span)
    out: dict[str, DtypeTemplate] = {}
    for i, item in enumerate(module.items):
        if not isinstance(item, ast.Pragma) or item.name != PRAGMA:
            continue
        t = _template(item)
        if t.name in out:
            raise TilecError(f"a second dtype_template names '{t.name}'", t.span,
                             [note("first named here", out[t.name].span)])
        before = [f for f in module.items[:i] if isinstance(f, ast.FuncDef) and uses(f, t.name)]
        if before:
            raise TilecError(f"dtype_template({t.name}, ...) must come before the functions "
                             f"that use {t.name}; '{before[0].name}' is above it", t.span,
                             [note(f"'{before[0].name}' uses {t.name} here",
                                   before[0].name_span)])
        after = [f for f in module.items[i + 1:] if isinstance(f, ast.FuncDef)]
        for f in after:
            _check_clash(t, f)
        if not any(uses(f, t.name) for f in after):
            raise TilecError(f"dtype_template names '{t.name}', which no function after it uses "
                             f"(as Tensor<{t.name}>, a scalar of type {t.name} or "
                             f"cast(x, {t.name}))", t.span)
        out[t.name] = t
    return out


def _check_clash(t: DtypeTemplate, f: ast.FuncDef) -> None:
    if t.name in symbols_of(f):
        raise TilecError(f"dtype_template '{t.name}' has the name of a shape symbol of "
                         f"'{f.name}'", t.span)
    for p in f.params:
        if p.name == t.name:
            raise TilecError(f"dtype_template '{t.name}' has the name of a parameter of "
                             f"'{f.name}'", t.span, [note("the parameter", p.name_span)])


def check_defines(templates: dict[str, DtypeTemplate], dtypes: dict[str, str]) -> None:
    """``-D T=DTYPE``: T names a dtype template and DTYPE is one of its list."""
    for name, value in dtypes.items():
        if name not in templates:
            raise TilecError(f"-D {name}={value}: '{name}' is no dtype_template of this file"
                             f"{did_you_mean(name, templates)}")
        t = templates[name]
        dtype = DTYPE_ALIASES.get(value)
        if dtype not in t.dtypes:
            raise TilecError(f"-D {name}={value}: dtype_template {name} takes "
                             f"{', '.join(t.dtypes)}", t.span)


def instances(f: ast.FuncDef, templates: dict[str, DtypeTemplate],
              dtypes: dict[str, str]) -> list[Instance]:
    """The analyses of ``f``: one per dtype of the template it uses (one, under its own name,
    when ``-D`` fixes it), or ``f`` itself."""
    used = [t for t in templates.values() if uses(f, t.name)
            and t.pragma.span.line < f.span.line]
    if not used:
        return [Instance(f.name, {})]
    if len(used) > 1:
        raise TilecError(f"'{f.name}' uses two dtype templates ({used[0].name}, "
                         f"{used[1].name}); at most one per function", f.name_span)
    t = used[0]
    if t.name in dtypes:
        return [Instance(f.name, {t.name: DTYPE_ALIASES[dtypes[t.name]]})]
    return [Instance(f"{f.name}__{d}", {t.name: d}, f.name) for d in t.dtypes]

"""Pass pipelines that mix tilec's Python passes with upstream MLIR passes.

Python-defined passes are not in MLIR's registry, so ``PassManager.parse`` cannot see them.
A pipeline here is a comma-separated list at the top level; each element is either a tilec
pass name (with optional ``{key=value ...}`` options) or any upstream pipeline element
(``canonicalize``, ``cse``, ``func.func(...)``); consecutive upstream elements run in one
upstream ``PassManager``.

A tilec pass declares its options as the fields of a frozen dataclass (the field
``no_generic`` is the option ``no-generic``); the parser fills one from the text, checks each
value against its field's type (``bool``, ``int``, ``str``, and the ``choices`` of an
:func:`option`), and reports a wrong one at its place in the pipeline text.
"""
from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from .diagnostics import DiagnosticSink, Span, TilecError, register_source
from .mlir import ir, new_context, passmanager

PIPELINE_FILE = "<pass-pipeline>"   # the name errors in a pipeline's text are located in


@dataclass(frozen=True)
class NoOptions:
    """The options of a pass that takes none."""


def option(default: Any, choices: Callable[[], Iterable[str]] | None = None) -> Any:
    """A pass option's field: its default and, for a string, a function giving the values it
    may take (asked when a pipeline is parsed, so that it sees what is registered by then)."""
    return field(default=default, metadata={"choices": choices})


@dataclass
class PassContext:
    """What a tilec pass gets besides the module: its options and where warnings go."""

    options: Any = field(default_factory=NoOptions)
    sink: DiagnosticSink = field(default_factory=DiagnosticSink)


PassFn = Callable[[ir.Module, PassContext], None]


@dataclass(frozen=True)
class PassInfo:
    name: str
    run: PassFn
    summary: str
    options: type = NoOptions


REGISTRY: dict[str, PassInfo] = {}


def register(name: str, summary: str, options: type = NoOptions):
    """Decorator: register ``fn(module, context)`` as tilec pass ``name`` whose options are
    the frozen dataclass ``options``; it raises TilecError (located with
    ``tilec.dialect.locations.span_of``) for a user's mistake."""
    _check_option_types(options)

    def wrap(fn: PassFn) -> PassFn:
        REGISTRY[name] = PassInfo(name, fn, summary, options)
        return fn
    return wrap


def _check_option_types(options: type) -> None:
    """A pass's options must be a frozen dataclass of bool, int and str fields."""
    params = getattr(options, "__dataclass_params__", None)
    if params is None or not params.frozen:
        raise TypeError(f"pass options {options.__name__} must be a frozen dataclass")
    for name, kind in typing.get_type_hints(options).items():
        if kind not in (bool, int, str):
            raise TypeError(f"pass option {options.__name__}.{name} is {kind}, not bool, int "
                            "or str")


# --- parsing -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Piece:
    """A piece of a pipeline's text and where it starts in the whole text."""

    text: str
    start: int

    def span(self, source: str) -> Span:
        line = source.count("\n", 0, self.start) + 1
        col = self.start - (source.rfind("\n", 0, self.start) + 1) + 1
        return Span(PIPELINE_FILE, line, col, line, col + max(len(self.text), 1))

    def sub(self, begin: int, end: int) -> "_Piece":
        """The stripped text of ``self.text[begin:end]``, where it starts."""
        raw = self.text[begin:end]
        return _Piece(raw.strip(), self.start + begin + len(raw) - len(raw.lstrip()))


def _pieces(whole: _Piece) -> list[_Piece]:
    parts: list[_Piece] = []
    depth, begin = 0, 0
    for i, ch in enumerate(whole.text):
        if ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1
            if depth < 0:
                raise TilecError(f"unbalanced ')' or '}}' in pass pipeline '{whole.text}'")
        if ch == "," and depth == 0:
            parts.append(whole.sub(begin, i))
            begin = i + 1
    if depth != 0:
        raise TilecError(f"unbalanced '(' or '{{' in pass pipeline '{whole.text}'")
    last = whole.sub(begin, len(whole.text))
    if last.text:
        parts.append(last)
    return parts


Step = tuple[str, object]  # ("tilec", (PassInfo, options)) | ("upstream", text)
MODULE_PREFIX = "builtin.module("


def parse_pipeline(text: str) -> list[Step]:
    """The steps of pipeline ``text``; a mistake in it is a TilecError located in the text
    (file :data:`PIPELINE_FILE`), reported before anything runs."""
    register_source(PIPELINE_FILE, text)
    return _parse(_Piece(text, 0).sub(0, len(text)), text)


def _parse(whole: _Piece, source: str) -> list[Step]:
    steps: list[Step] = []
    for piece in _pieces(whole):
        element = piece.text
        if element.startswith(MODULE_PREFIX) and element.endswith(")"):
            steps.extend(_parse(piece.sub(len(MODULE_PREFIX), len(element) - 1), source))
            continue
        name = element.partition("{")[0].strip()
        if name in REGISTRY:
            info = REGISTRY[name]
            steps.append(("tilec", (info, _options(info, piece, source))))
        elif is_upstream_element(element):
            steps.append(("upstream", element))
        else:
            known = ", ".join(sorted(REGISTRY)) or "none"
            raise TilecError(f"unknown pass '{element}' (tilec passes: {known}; or any "
                             "upstream MLIR pass)", piece.span(source))
    return steps


def _options(info: PassInfo, piece: _Piece, source: str) -> Any:
    """The options of ``info`` that ``piece`` (``NAME{key=value ...}``) gives."""
    open_at = piece.text.find("{")
    if open_at < 0:
        return info.options()
    if not piece.text.endswith("}"):
        raise TilecError(f"malformed pass options in '{piece.text}'", piece.span(source))
    fields = {f.name.replace("_", "-"): f for f in dataclasses.fields(info.options)}
    kinds = typing.get_type_hints(info.options)
    body = piece.sub(open_at + 1, len(piece.text) - 1)
    values: dict[str, Any] = {}
    for word in _words(body):
        key, eq, value = word.text.partition("=")
        at = word.span(source)
        if key not in fields:
            offered = f"options: {', '.join(fields)}" if fields else "it takes none"
            raise TilecError(f"{info.name} has no option '{key}'; {offered}", at)
        f = fields[key]
        if f.name in values:
            raise TilecError(f"{info.name}: option '{key}' is given twice", at)
        values[f.name] = _value(info.name, key, value if eq else None, kinds[f.name],
                                f.metadata.get("choices"), at)
    return info.options(**values)


def _words(piece: _Piece) -> list[_Piece]:
    out, begin = [], None
    for i, ch in enumerate(piece.text + " "):
        if ch.isspace() and begin is not None:
            out.append(piece.sub(begin, i))
            begin = None
        elif not ch.isspace() and begin is None:
            begin = i
    return out


def _value(pass_name: str, key: str, text: str | None, kind: type,
           choices: Callable[[], Iterable[str]] | None, at: Span) -> Any:
    """Option ``key``'s ``text`` (None: given without '=') as a ``kind``."""
    where = f"{pass_name}: option '{key}'"
    if kind is bool:
        if text in (None, "true", "false"):
            return text != "false"
        raise TilecError(f"{where} expects true or false, got '{text}'", at)
    if text is None:
        raise TilecError(f"{where} needs a value ({key}=...)", at)
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise TilecError(f"{where} expects an integer, got '{text}'", at) from None
    known = list(choices()) if choices is not None else None
    if known is not None and text not in known:
        raise TilecError(f"{where} expects one of {', '.join(known)}, got '{text}'", at)
    return text


def options_help(info: PassInfo) -> str:
    """The options of ``info`` as ``name=VALUES (default D)``, separated by commas ("" when it
    takes none): what ``tilec-opt --help`` lists."""
    kinds = typing.get_type_hints(info.options)
    out = []
    for f in dataclasses.fields(info.options):
        kind, choices = kinds[f.name], f.metadata.get("choices")
        values = "|".join(choices()) if choices else "true|false" if kind is bool else \
            kind.__name__.upper()
        default = str(f.default).lower() if kind is bool else f.default if f.default != "" \
            else '""'
        out.append(f"{f.name.replace('_', '-')}={values} (default {default})")
    return ", ".join(out)


def with_options(steps: Sequence[Step], name: str, **values: Any) -> list[Step]:
    """``steps`` with ``values`` (field names) set in the options of each run of pass
    ``name``."""
    out: list[Step] = []
    for kind, payload in steps:
        if kind == "tilec" and payload[0].name == name:  # type: ignore[index]
            info, options = payload  # type: ignore[misc]
            payload = (info, dataclasses.replace(options, **values))
        out.append((kind, payload))
    return out


@functools.lru_cache(maxsize=1024)
def is_upstream_element(element: str) -> bool:
    """Whether ``element`` parses as an upstream pipeline element.  It is checked in a
    context of its own, whether or not one is current; the passes and their options are
    registered for the whole process, so the answer is kept for it."""
    with new_context():
        try:
            passmanager.PassManager.parse(f"builtin.module({element})")
        except ValueError:
            return False
    return True


def run_pipeline(module: ir.Module, steps: Sequence[Step], sink: DiagnosticSink | None = None,
                 after_each: Callable[[str, ir.Module], None] | None = None) -> None:
    """Run ``steps`` on ``module``; ``after_each(name, module)`` is called after every step."""
    sink = sink or DiagnosticSink()
    i = 0
    while i < len(steps):
        kind, payload = steps[i]
        if kind == "tilec":
            info, opts = payload  # type: ignore[misc]
            info.run(module, PassContext(opts, sink))
            name = info.name
            i += 1
        else:
            group = []
            while i < len(steps) and steps[i][0] == "upstream" and (not group or not after_each):
                group.append(steps[i][1])
                i += 1
            name = ",".join(group)  # type: ignore[arg-type]
            pm = passmanager.PassManager.parse(f"builtin.module({name})")
            try:
                pm.run(module.operation)
            except ir.MLIRError as e:
                raise TilecError(f"pass '{name}' failed: {e}") from None
        if after_each is not None:
            after_each(name, module)

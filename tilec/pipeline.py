"""Pass pipelines that mix tilec's Python passes with upstream MLIR passes.

Python-defined passes are not in MLIR's registry, so ``PassManager.parse`` cannot see them.
A pipeline here is a comma-separated list at the top level; each element is either a tilec
pass name (with optional ``{key=value ...}`` options) or any upstream pipeline element
(``canonicalize``, ``cse``, ``func.func(...)``); consecutive upstream elements run in one
upstream ``PassManager``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable, Sequence

from .diagnostics import DiagnosticSink, TilecError
from .mlir import ir, new_context, passmanager


@dataclass
class PassContext:
    """What a tilec pass gets besides the module: its options and where warnings go."""

    options: dict[str, str] = field(default_factory=dict)
    sink: DiagnosticSink = field(default_factory=DiagnosticSink)


PassFn = Callable[[ir.Module, PassContext], None]


@dataclass(frozen=True)
class PassInfo:
    name: str
    run: PassFn
    summary: str


REGISTRY: dict[str, PassInfo] = {}


def register(name: str, summary: str):
    """Decorator: register ``fn(module, context)`` as tilec pass ``name``; it raises
    TilecError (located with ``tilec.dialect.locations.span_of``) for a user's mistake."""
    def wrap(fn: PassFn) -> PassFn:
        REGISTRY[name] = PassInfo(name, fn, summary)
        return fn
    return wrap


def split_top_level(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1
            if depth < 0:
                raise TilecError(f"unbalanced ')' or '}}' in pass pipeline '{text}'")
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if depth != 0:
        raise TilecError(f"unbalanced '(' or '{{' in pass pipeline '{text}'")
    if cur.strip():
        parts.append(cur.strip())
    return parts


def _split_options(element: str) -> tuple[str, dict[str, str]]:
    if "{" not in element:
        return element, {}
    name, rest = element.split("{", 1)
    if not rest.endswith("}"):
        raise TilecError(f"malformed pass options in '{element}'")
    opts = {}
    for item in rest[:-1].split():
        key, _, value = item.partition("=")
        opts[key] = value
    return name.strip(), opts


Step = tuple[str, object]  # ("tilec", (PassInfo, options)) | ("upstream", text)


def parse_pipeline(text: str) -> list[Step]:
    steps: list[Step] = []
    for element in split_top_level(text.strip()):
        if element.startswith("builtin.module(") and element.endswith(")"):
            steps.extend(parse_pipeline(element[len("builtin.module("):-1]))
            continue
        name, opts = _split_options(element)
        if name in REGISTRY:
            steps.append(("tilec", (REGISTRY[name], opts)))
        else:
            steps.append(("upstream", element))
    # validate upstream pieces now, so a typo is reported before anything runs
    for kind, payload in steps:
        if kind == "upstream" and not is_upstream_element(payload):  # type: ignore[arg-type]
            known = ", ".join(sorted(REGISTRY)) or "none"
            raise TilecError(f"unknown pass '{payload}' (tilec passes: {known}; or any "
                             "upstream MLIR pass)")
    return steps


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
            info.run(module, PassContext(dict(opts), sink))
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

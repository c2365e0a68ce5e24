"""A generated program as data: functions of ``let`` statements over named values, each
statement one construct, printable as ``.tile`` text.

The generator (:mod:`tilec.fuzz.generate`) builds it, the oracles (:mod:`tilec.fuzz.oracles`)
run it at the sizes it carries, and the reducer (:mod:`tilec.fuzz.reduce`) edits it: drop a
statement by replacing its value with an operand of the same type, drop a result, shrink a
size.  Statements keep their operands as names apart from the expression text (a template
with ``{0}``, ``{1}``...), so that renaming an operand is a list edit, not a text edit.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from ..dims import ELLIPSIS, Dim

Shape = tuple  # of Dim, with ELLIPSIS ("...") possibly first


@dataclass(frozen=True)
class Type:
    dtype: str
    shape: Shape          # () for a scalar parameter's value

    def text(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        return f"Tensor<{self.dtype}>[{dims}]"

    @property
    def certain(self) -> tuple[Dim, ...]:
        return tuple(d for d in self.shape if d != ELLIPSIS)

    @property
    def generic(self) -> bool:
        return bool(self.shape) and self.shape[0] == ELLIPSIS


@dataclass(frozen=True)
class Param:
    name: str
    type: Type
    scalar: bool = False
    default: str | None = None      # a scalar's default, as written
    passed: bool = True             # False: the call leaves the scalar to its default


@dataclass(frozen=True)
class Stmt:
    names: tuple[str, ...]          # one, or several for a call with several results
    template: str                   # the expression, operands as {0}, {1}, ...
    operands: tuple[str, ...]
    types: tuple[Type, ...]         # one per name
    constructs: frozenset[str]      # what the summary counts this statement as

    def text(self) -> str:
        expr = self.template.format(*self.operands)
        target = self.names[0] if len(self.names) == 1 else f"({', '.join(self.names)})"
        return f"  let {target} = {expr};"


@dataclass(frozen=True)
class Function:
    name: str
    params: tuple[Param, ...]
    body: tuple[Stmt, ...]
    results: tuple[str, ...]
    result_types: tuple[Type, ...]  # as declared (the return converts the dtype)
    pragmas: tuple[str, ...] = ()   # inside the body: they apply to this function only

    def text(self) -> str:
        params = ", ".join(f"{p.name}: {p.type.dtype if p.scalar else p.type.text()}"
                           + (f" = {p.default}" if p.default is not None else "")
                           for p in self.params)
        types = [t.text() for t in self.result_types]
        result = types[0] if len(types) == 1 else f"({', '.join(types)})"
        ret = self.results[0] if len(self.results) == 1 else f"({', '.join(self.results)})"
        lines = [f"func {self.name}({params}) -> {result} {{", *(f"  {p}" for p in self.pragmas),
                 *(s.text() for s in self.body), f"  return {ret};", "}"]
        return "\n".join(lines)

    def pruned(self, params: bool = True) -> "Function":
        """Without the statements (and, with ``params``, the parameters) that the results
        do not need."""
        needed = set(self.results)
        body = []
        for s in reversed(self.body):
            if needed & set(s.names):
                body.append(s)
                needed |= set(s.operands)
        body.reverse()
        kept = [p for p in self.params if p.name in needed or not params]
        types = [t for s in body for t in s.types] + list(self.result_types)
        symbols = {x for t in types for d in t.certain for x in d.symbols()}
        for p in self.params:   # a parameter that binds a symbol nothing else binds stays
            bound = {x for q in kept for d in q.type.certain for x in d.symbols()}
            if p not in kept and {x for d in p.type.certain for x in d.symbols()} & (
                    symbols - bound):
                kept.append(p)
        kept.sort(key=self.params.index)
        return dataclasses.replace(self, params=tuple(kept), body=tuple(body))

    def types(self) -> dict[str, Type]:
        found = {p.name: p.type for p in self.params}
        for s in self.body:
            found.update(zip(s.names, s.types))
        return found


@dataclass(frozen=True)
class Program:
    functions: tuple[Function, ...]     # helpers first; the last is the one the oracles run
    sizes: dict[str, int]               # each shape symbol of the entry's parameters
    lead: tuple[int, ...] = ()          # what "..." stands for at run time
    seed: int = 0                       # of the argument values
    dtype_template: str | None = None   # the dtype the run takes, float32 written T
    type_symbol: str = "T"

    @property
    def entry(self) -> Function:
        return self.functions[-1]

    def text(self) -> str:
        head = [f"// tilec fuzz: sizes {self.sizes_text()}"]
        functions = [f.text() + "\n" for f in self.functions]
        if self.dtype_template:
            head.append(f"#pragma dtype_template({self.type_symbol}, "
                        "[float16, bfloat16, float32])")
            functions = [re.sub(r"\bfloat32\b", self.type_symbol, f) for f in functions]
        return "\n".join([*head, *functions])

    def dtype(self, declared: str) -> str:
        """The dtype a run gives a value declared ``declared``."""
        return self.dtype_template if self.dtype_template and declared == "float32" \
            else declared

    @property
    def entry_name(self) -> str:
        """The entry the reference runs (a dtype template's instance)."""
        if self.dtype_template:
            return f"{self.entry.name}__{self.dtype_template}"
        return self.entry.name

    def sizes_text(self) -> str:
        parts = [f"{k}={v}" for k, v in sorted(self.sizes.items())]
        if self.entry.params and any(p.type.generic for p in self.entry.params):
            parts.append(f"...={self.lead}")
        if self.dtype_template:
            parts.append(f"T={self.dtype_template}")
        passed = [p.name for p in self.entry.params if p.scalar and p.default and p.passed]
        if passed:   # scalars with a default that the run passes all the same
            parts.append(f"pass={','.join(passed)}")
        return " ".join(parts) or "(fixed)"

    def all_constructs(self) -> frozenset[str]:
        found = set()
        if any(p.type.generic for p in self.entry.params):
            found.add("ellipsis")
        if any(f.pragmas for f in self.functions):
            found.add("shape_template")
        if self.dtype_template:
            found.add("dtype_template")
        for f in self.functions:
            for s in f.body:
                found |= s.constructs
        if len(self.entry.results) > 1:
            found.add("several_results")
        if any(p.scalar for p in self.entry.params):
            found.add("scalar")
        if any(p.scalar and not p.passed for p in self.entry.params):
            found.add("scalar_default")
        return frozenset(found)

    def pruned(self) -> "Program":
        """Without the statements, parameters and helper functions nothing needs."""
        entry = self.entry.pruned()
        called = {s.template.split("(")[0] for s in entry.body}
        helpers = tuple(h.pruned(params=False) for h in self.functions[:-1] if h.name in called)
        # a dtype template that no float32 value is left to use would be rejected
        template = self.dtype_template if any(
            re.search(r"\bfloat32\b", f.text()) for f in (*helpers, entry)) else None
        return dataclasses.replace(self, functions=(*helpers, entry), dtype_template=template)

    def renamed(self, prefix: str) -> "Program":
        """The same program with every function's name prefixed (several programs then
        share one file, and one build)."""
        def rename(f: Function) -> Function:
            body = tuple(dataclasses.replace(s, template=prefix + s.template)
                         if "call" in s.constructs else s for s in f.body)
            return dataclasses.replace(f, name=prefix + f.name, body=body)
        return dataclasses.replace(self, functions=tuple(map(rename, self.functions)),
                                   type_symbol=prefix + self.type_symbol)

    def replace_entry(self, entry: Function) -> "Program":
        return dataclasses.replace(self, functions=(*self.functions[:-1], entry))

"""A written failure run again: the ``.tile`` file ``tilec fuzz`` wrote, through the same
oracles, at the sizes its header gives.

In: the file's text (its header ``// tilec fuzz: sizes n=3 d=5 ...=(2, 3) T=float16`` and
``// tilec fuzz --seed S: program I, ...``).  Out: the failures, as
:func:`~tilec.fuzz.oracles.check` finds them.  The entry is the file's last function; the
arguments come from the program number as they did in the run, scalars without a default
are passed and the others left to it.  Regression tests replay reduced programs with it.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from ..dialect import params_of, tensor_info
from ..diagnostics import TilecError
from ..frontend import compile_source
from ..harness.reference import find_function
from .oracles import FILE, Failure, check_batch
from .program import Param, Type

SIZES = re.compile(r"^// tilec fuzz: sizes (.*)$", re.M)
PROGRAM = re.compile(r"^// tilec fuzz --seed \d+: program (\d+)", re.M)
ENTRY = re.compile(r"^func\s+(\w+)\s*\(", re.M)
TEMPLATE_SYMBOL = "T"


@dataclass(frozen=True)
class Entry:
    name: str
    params: tuple[Param, ...]
    result_types: tuple[Type, ...]


@dataclass(frozen=True)
class Replay:
    """What the oracles read of a program, taken from its text (``pass=s1,s2`` in the
    header: scalars with a default that the run passed all the same)."""
    source: str
    entry: Entry
    sizes: dict[str, int]
    lead: tuple[int, ...]
    seed: int
    dtype_template: str | None

    def text(self) -> str:
        return self.source

    def dtype(self, declared: str) -> str:
        if self.dtype_template and declared == "float32":
            return self.dtype_template
        return declared

    @property
    def entry_name(self) -> str:
        return f"{self.entry.name}__{self.dtype_template}" if self.dtype_template \
            else self.entry.name

    def renamed(self, prefix: str) -> "Replay":
        """With every function (and a dtype template's type) prefixed, as
        :meth:`~tilec.fuzz.program.Program.renamed`: several files in one build."""
        text = self.source
        names = set(ENTRY.findall(text)) | ({TEMPLATE_SYMBOL} if self.dtype_template else set())
        for name in sorted(names, key=len, reverse=True):
            text = re.sub(rf"\b{name}\b", prefix + name, text)
        entry = dataclasses.replace(self.entry, name=prefix + self.entry.name)
        return dataclasses.replace(self, source=text, entry=entry)


def _header(text: str) -> tuple[dict[str, int], tuple[int, ...], str | None, set[str]]:
    found = SIZES.search(text)
    if found is None:
        raise TilecError("not a file tilec fuzz wrote: no '// tilec fuzz: sizes' line")
    sizes, lead, template, passed = {}, (), None, set()
    words = re.findall(r"(\S+)=(\([^)]*\)|\S+)", found.group(1))
    for key, value in words:
        if key == "...":
            lead = tuple(int(v) for v in re.findall(r"\d+", value))
        elif key == "T":
            template = value
        elif key == "pass":
            passed = set(value.split(","))
        else:
            sizes[key] = int(value)
    return sizes, lead, template, passed


def parse(text: str) -> Replay:
    sizes, lead, template, passed = _header(text)
    names = ENTRY.findall(text)
    if not names:
        raise TilecError("the file has no function")
    program = PROGRAM.search(text)
    module = compile_source(text, FILE)
    name = f"{names[-1]}__{template}" if template else names[-1]
    func = find_function(module, name)
    params = tuple(Param(p.name, Type(p.info.dtype, p.info.shape), p.scalar,
                         None if p.default is None else str(p.default),
                         p.default is None or p.name in passed)
                   for p in params_of(func))
    results = tuple(Type(i.dtype, i.shape) for i in map(tensor_info, func.type.results))
    if template:   # the oracles read the declared types, float32 standing for T
        params = tuple(Param(p.name, Type("float32" if p.type.dtype == template
                                          else p.type.dtype, p.type.shape), p.scalar,
                             p.default, p.passed) for p in params)
        results = tuple(Type("float32" if t.dtype == template else t.dtype, t.shape)
                        for t in results)
    return Replay(text, Entry(names[-1], params, results), sizes, lead,
                  int(program.group(1)) if program else 0, template)


def replay(texts: list[str], targets: list[str]) -> list[list[Failure]]:
    """The failures of each of ``texts``, built together (one library per target)."""
    return check_batch([parse(t) for t in texts], targets)

"""Delta debugging of a failing program: the smallest program found that fails the same way.

In: a :class:`~tilec.fuzz.program.Program` and one of its :class:`~tilec.fuzz.oracles.Failure`.
Out: a smaller program failing with the same oracle, target and message (numbers aside),
found greedily: drop a result, replace a statement's value by one of its operands of the same
type (dropping the statement), drop a pragma, shrink a size; after each step the statements,
parameters and helpers nothing uses are removed.  Bounded by a number of oracle runs.
"""
from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable, Iterator

from .oracles import Failure, check
from .program import Function, Param, Program, Stmt

NUMBER = re.compile(r"-?\d+(\.\d+)?(e[-+]?\d+)?|inf|nan")


def normalized(message: str) -> str:
    """The message with its numbers (sizes, counts, locations, values) replaced by N."""
    return NUMBER.sub("N", message.splitlines()[0] if message else "")[:160]


def same(a: Failure, b: Failure) -> bool:
    oracles = {a.oracle, b.oracle}
    return (a.target == b.target and normalized(a.message) == normalized(b.message)
            and (len(oracles) == 1 or oracles == {"reference", "O0-vs-O2"}))


def prune(program: Program) -> Program:
    return program.pruned()


def _rename(f: Function, old: str, new: str) -> Function:
    body = tuple(dataclasses.replace(s, operands=tuple(new if o == old else o
                                                       for o in s.operands))
                 for s in f.body if old not in s.names)
    results = tuple(new if r == old else r for r in f.results)
    return dataclasses.replace(f, body=body, results=results)


def _as_parameters(f: Function, s: Stmt) -> Function:
    params = tuple(Param(n, t) for n, t in zip(s.names, s.types))
    body = tuple(x for x in f.body if x is not s)
    return dataclasses.replace(f, params=f.params + params, body=body)


def candidates(program: Program) -> Iterator[Program]:
    f = program.entry
    for r in range(len(f.results)):
        if len(f.results) > 1:
            yield program.replace_entry(dataclasses.replace(
                f, results=(f.results[r],), result_types=(f.result_types[r],)))
    types = f.types()
    for s in reversed(f.body):
        if len(s.names) != 1:
            continue
        for o in dict.fromkeys(s.operands):
            if types[o] == s.types[0]:
                yield program.replace_entry(_rename(f, s.names[0], o))
    if f.pragmas:
        yield program.replace_entry(dataclasses.replace(f, pragmas=()))
    for sym, value in program.sizes.items():
        for smaller in dict.fromkeys((1, 2, value // 2)):
            if smaller < value and smaller >= 1:
                yield dataclasses.replace(program, sizes={**program.sizes, sym: smaller})
    for s in reversed(f.body):   # a value the failure needs, but not how it was computed
        yield program.replace_entry(_as_parameters(f, s))
    for i, extent in enumerate(program.lead):
        if extent > 1:
            yield dataclasses.replace(program, lead=program.lead[:i] + (1,) + program.lead[i + 1:])


def reduce(program: Program, failure: Failure, targets: list[str], *, max_runs: int = 60,
           max_seconds: float = 180.0,
           fails: Callable[[Program], list[Failure]] | None = None) -> Program:
    """The smallest program found that still fails like ``failure`` (``fails`` runs the
    oracles; by default :func:`~tilec.fuzz.oracles.check` on ``failure``'s target)."""
    target = failure.target if failure.target in targets else targets[0]
    extra = failure.oracle in ("cache", "threads")
    run = fails or (lambda p: check(p, [target], extra=extra))
    start, runs = time.monotonic(), 0
    current = prune(program)
    progress = True
    while progress:
        progress = False
        for candidate in candidates(current):
            if runs >= max_runs or time.monotonic() - start > max_seconds:
                return current
            candidate = prune(candidate)
            if candidate.text() == current.text():
                continue
            runs += 1
            if any(same(g, failure) for g in run(candidate)):
                current, progress = candidate, True
                break
    return current

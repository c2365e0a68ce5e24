"""Every shared example and corpus program, built for ``--target ascend-sim`` (the generated
Ascend C compiled against the CPU twin, strict sync checking on), matches the reference
interpreter under the numerical contract: at the sizes of its header, at each of the unaligned
sizes 1, 7, 127, 255, 1000 and 4097 for every shape symbol in turn (the others small; cases
over ``CAP`` elements are left out), and at every shape-template binding.

Each program is compiled once per session.  ``--ascend-sweep`` adds the exhaustive sweep: every
symbol at every size at once, and every pair of symbols, up to ``SWEEP_CAP`` elements.
"""
from __future__ import annotations

import functools
import itertools
import math
from typing import Any

import pytest
from test_corpus import PROGRAMS, Binding, assert_library_agrees, functions, tensor_level

import tilec
from tilec.dialect import tensor_info
from tilec.harness.reference import find_function
from tilec.mlir import ir

UNALIGNED = (1, 7, 127, 255, 1000, 4097)
CAP = 1 << 17
SWEEP_CAP = 1 << 21


@functools.cache
def library(key: str) -> Any:
    p = PROGRAMS[key]
    return tilec.compile_string(p.text, p.path.name, target="ascend-sim")


def symbols_of(func_op: Any) -> list[str]:
    return [ir.StringAttr(s).value for s in func_op.attributes["tile.symbols"]]


def templates_of(func_op: Any) -> list[dict[str, int]]:
    """Every binding of the function's shape templates (none: [])."""
    if "tile.templates" not in func_op.attributes:
        return []
    table = {a.name: [int(v) for v in ir.DenseI64ArrayAttr(a.attr)]
             for a in ir.DictAttr(func_op.attributes["tile.templates"])}
    return [dict(zip(table, values)) for values in itertools.product(*table.values())]


def elements(func_op: Any, binding: Binding) -> int:
    """Elements of the arguments and results at ``binding`` (dimensions that are not
    non-negative integers count 0: the case is refused, and cheap)."""
    symbols, lead = binding
    total = 0
    for t in list(func_op.type.inputs) + list(func_op.type.results):
        info = tensor_info(t)
        size = math.prod(lead) if info.rank_generic else 1
        for d in info.dims:
            value = d.evaluate({**symbols, **{s: 1 for s in d.symbols() - symbols.keys()}})
            size *= max(int(value), 0)
        total += size
    return total


def cases(key: str, func_op: Any, sweep: bool) -> list[Binding]:
    """The bindings a function runs at (module docstring)."""
    p = PROGRAMS[key]
    found = list(p.sizes) + [b for b in p.kernel_sizes if b not in p.sizes]
    base_symbols, lead = p.kernel_sizes[0]
    names = symbols_of(func_op)
    extra = [({**base_symbols, s: v}, lead) for s in names for v in UNALIGNED]
    if sweep:
        extra += [({s: v for s in names}, lead) for v in UNALIGNED]
        extra += [({**base_symbols, a: v, b: w}, lead) for a, b in itertools.combinations(names, 2)
                  for v in UNALIGNED for w in UNALIGNED]
    cap = SWEEP_CAP if sweep else CAP
    found += [b for b in extra if b not in found and elements(func_op, b) <= cap]
    found += [({**base_symbols, **t}, lead) for t in templates_of(func_op)]
    return found


def check(key: str, function: str, binding: Binding, index: int) -> None:
    """The library's result agrees with the reference at ``binding``, or both refuse it."""
    assert_library_agrees(tensor_level(key), function, library(key), binding, index)


@pytest.mark.parametrize("key", PROGRAMS)
def test_ascend_sim_matches_the_reference(key: str, request: pytest.FixtureRequest) -> None:
    sweep = request.config.getoption("--ascend-sweep")
    module = tensor_level(key)
    for function in functions(module):
        func_op = find_function(module, function)
        for index, binding in enumerate(cases(key, func_op, sweep)):
            check(key, function, binding, index)

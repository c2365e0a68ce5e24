"""Semantic preservation over the shared examples and the corpus (``test/corpus/*.tile``).

Every function of every program runs in the reference interpreter on its tensor-level IR
(``--emit=ir``) and again (a) after the default ``-O2`` pipeline and (b) after the kernel level
too (``tile-kernel{all=true target=cpu}``, each kernel body run once per grid point); the
results must agree under the numerical contract.  Fixed seeds; the symbol sizes come from each
program's header:

    // SIZES: n=1 m=1 ; n=7 m=127 ...=(2,3)   bindings for the tensor-level comparison (a)
    // KERNEL: n=3 m=5                         small bindings, also run at the kernel level (b)
    // GROUPS: f=1 g=2                         fused groups after -O2, where fusion is the point
    // MATERIALISED: f=0 g=1                   group outputs that are no function result

``...=(2,3)`` gives a rank-generic function's leading dimensions (its peeled ``$k`` symbols
take the last of them).  Scalars with a default take it in the first binding and a random
value in the others.  Every corpus file also compiles with ``tilec FILE --emit=kernel`` for
the cpu, ascend and ptx target descriptions, and the corpus calls every built-in.
"""
from __future__ import annotations

import ast as pyast
import dataclasses
import functools
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import EXAMPLE_NAMES, REPO, SHARED_EXAMPLES

import tilec.passes  # noqa: F401  (registers the passes)
from tilec.cli import main
from tilec.diagnostics import DiagnosticSink
from tilec.dialect import params_of, tensor_info
from tilec.driver import CompileOptions, build_kernels, optimize
from tilec.frontend import ast, compile_source
from tilec.frontend.parser import parse
from tilec.frontend.sema import BUILTINS
from tilec.harness.numerics import NUMPY_DTYPES, assert_close
from tilec.harness.reference import ReferenceError, allowed, find_function, run
from tilec.mlir import ir

CORPUS = REPO / "test" / "corpus"
CORPUS_FILES = sorted(CORPUS.glob("*.tile"))

Binding = tuple[dict[str, int], tuple[int, ...]]  # symbol values, the '...' dimensions

# the shared examples cannot carry a header: theirs is here (test_fuse counts their groups)
EXAMPLE_HEADERS = {
    "swiglu": "// SIZES: batch=1 seq=1 hidden=1 ; batch=2 seq=127 hidden=255\n"
              "// KERNEL: batch=1 seq=1 hidden=1 ; batch=2 seq=3 hidden=7",
    "layernorm": "// SIZES: ...=(1,) ; ...=(1000,) ; ...=(3,5) ; ...=(2,7,127)\n"
                 "// KERNEL: ...=(1,) ; ...=(2,3)",
    "rmsnorm_templated": "// SIZES: seq=1 hidden=1 ; seq=8192 hidden=7 ; seq=127 hidden=255\n"
                         "// KERNEL: seq=1 hidden=1 ; seq=5 hidden=7",
    "rope": "// SIZES: tokens=1 heads=1 half=1 ; tokens=127 heads=7 half=32\n"
            "// KERNEL: tokens=1 heads=1 half=1 ; tokens=3 heads=2 half=5",
}


@dataclasses.dataclass(frozen=True)
class Program:
    """A source file and what its header asks of it."""

    path: Path
    sizes: list[Binding]
    kernel_sizes: list[Binding]
    groups: dict[str, int]
    materialised: dict[str, int]

    @property
    def text(self) -> str:
        return self.path.read_text()


def _bindings(line: str) -> list[Binding]:
    out = []
    for part in line.split(";"):
        symbols: dict[str, int] = {}
        lead: tuple[int, ...] = ()
        for item in part.split():
            name, value = item.split("=")
            if name == "...":
                lead = tuple(pyast.literal_eval(value))
            else:
                symbols[name] = int(value)
        out.append((symbols, lead))
    return out


def _counts(line: str) -> dict[str, int]:
    return {f: int(n) for f, n in (item.split("=") for item in line.split())}


def program(path: Path, header: str | None = None) -> Program:
    fields = dict(re.findall(r"^// (SIZES|KERNEL|GROUPS|MATERIALISED): (.*)$",
                             header or path.read_text(), re.MULTILINE))
    return Program(path, _bindings(fields["SIZES"]), _bindings(fields["KERNEL"]),
                   _counts(fields.get("GROUPS", "")), _counts(fields.get("MATERIALISED", "")))


PROGRAMS = {f"examples/{name}": program(SHARED_EXAMPLES / f"{name}.tile", EXAMPLE_HEADERS[name])
            for name in EXAMPLE_NAMES}
PROGRAMS |= {f"corpus/{p.stem}": program(p) for p in CORPUS_FILES}


# ---------------------------------------------------------------------------------------------
# Modules


@functools.cache
def tensor_level(key: str) -> ir.Module:
    p = PROGRAMS[key]
    return compile_source(p.text, p.path.name)


@functools.cache
def optimized(key: str) -> ir.Module:
    module = tensor_level(key)
    copy = ir.Module.parse(module.operation.get_asm(enable_debug_info=True), module.context)
    with module.context:
        optimize(copy, CompileOptions(), DiagnosticSink())
    return copy


@functools.cache
def kernel_level(key: str) -> ir.Module:
    module = optimized(key)
    copy = ir.Module.parse(module.operation.get_asm(enable_debug_info=True), module.context)
    with module.context:
        build_kernels(copy, CompileOptions(), DiagnosticSink())
    return copy


def functions(module: ir.Module) -> list[str]:
    return [ir.StringAttr(op.attributes["sym_name"]).value for op in module.body.operations]


# ---------------------------------------------------------------------------------------------
# Arguments


def arguments(func_op: Any, binding: Binding, rng: np.random.Generator,
              defaults: bool) -> dict[str, object]:
    """Random arguments for ``binding`` by parameter name; scalars with a default are left
    out when ``defaults``."""
    symbols, lead = binding
    peeled = [ir.StringAttr(s).value for s in func_op.attributes["tile.lead"]] \
        if "tile.lead" in func_op.attributes else []
    if len(peeled) > len(lead):
        raise ValueError(f"...={lead} is too short for the peeled dimensions {peeled}")
    known = symbols | dict(zip(peeled, lead[len(lead) - len(peeled):]))
    out: dict[str, object] = {}
    for p in params_of(func_op):
        if p.scalar:
            if not (defaults and p.default is not None):
                out[p.name] = int(rng.integers(1, 5)) if p.info.dtype == "int32" \
                    else float(rng.uniform(0.1, 1.0))
            continue
        shape = tuple(int(d.evaluate(known)) for d in p.info.dims)
        if p.info.rank_generic:
            shape = lead[:len(lead) - len(peeled)] + shape
        if p.info.dtype == "int32":
            out[p.name] = rng.integers(-50, 50, shape).astype(np.int32)
        else:
            out[p.name] = rng.uniform(-2, 2, shape).astype(NUMPY_DTYPES[p.info.dtype])
    return out


def assert_same_results(before: ir.Module, after: ir.Module, function: str,
                        bindings: list[Binding]) -> None:
    func_op = find_function(before, function)
    for index, binding in enumerate(bindings):
        rng = np.random.default_rng([zlib.crc32(function.encode()), index])
        args = arguments(func_op, binding, rng, defaults=index == 0)
        want, got = run(before, function, **args), run(after, function, **args)
        want = want if isinstance(want, tuple) else (want,)
        got = got if isinstance(got, tuple) else (got,)
        assert len(got) == len(want)
        for k, (g, w, t) in enumerate(zip(got, want, func_op.type.results)):
            assert g.dtype == w.dtype, f"{function} result {k} with {binding}"
            try:
                assert_close(g, w.astype(np.float64), tensor_info(t).dtype)
            except AssertionError as e:
                raise AssertionError(f"{function} result {k} with {binding}: {e}") from None


def assert_library_agrees(module: ir.Module, function: str, lib: Any, binding: Binding,
                          index: int) -> None:
    """A built library's result agrees with the reference at ``binding``, or both refuse it."""
    func_op = find_function(module, function)
    rng = np.random.default_rng([zlib.crc32(function.encode()), index])
    try:
        args = arguments(func_op, binding, rng, defaults=index == 0)
        want, allowances = allowed(module, function, **args)
    except (ReferenceError, ValueError):
        with pytest.raises((ValueError, RuntimeError, TypeError)):
            getattr(lib, function)(**args)
        return
    got = getattr(lib, function)(**args)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for k, (g, w, d, t) in enumerate(zip(got, want, allowances, func_op.type.results)):
        assert g.dtype == w.dtype and g.shape == w.shape
        try:
            assert_close(g, w, tensor_info(t).dtype, d)
        except AssertionError as e:
            raise AssertionError(f"{function} result {k} with {binding}: {e}") from None


# ---------------------------------------------------------------------------------------------
# Tests


@pytest.mark.parametrize("key", PROGRAMS)
def test_default_pipeline_keeps_the_results(key: str) -> None:
    p = PROGRAMS[key]
    bindings = p.sizes + [b for b in p.kernel_sizes if b not in p.sizes]
    for function in functions(tensor_level(key)):
        assert_same_results(tensor_level(key), optimized(key), function, bindings)


@pytest.mark.parametrize("key", PROGRAMS)
def test_kernel_level_keeps_the_results(key: str) -> None:
    for function in functions(tensor_level(key)):
        assert_same_results(tensor_level(key), kernel_level(key), function,
                            PROGRAMS[key].kernel_sizes)


def fused_ops(module: ir.Module, function: str) -> list[ir.Operation]:
    body = find_function(module, function).regions[0].blocks[0]
    return [op.operation for op in body.operations if op.operation.name == "tile.fused"]


@pytest.mark.parametrize("key", [k for k, p in PROGRAMS.items() if p.groups])
def test_fused_groups(key: str) -> None:
    module = optimized(key)
    p = PROGRAMS[key]
    assert {f: len(fused_ops(module, f)) for f in p.groups} == p.groups
    materialised = {}
    for function in p.materialised:
        returned = list(find_function(module, function).regions[0].blocks[0].operations)[-1]
        materialised[function] = sum(r not in list(returned.operands)
                                     for op in fused_ops(module, function) for r in op.results)
    assert materialised == p.materialised


@pytest.mark.parametrize("target", ["cpu", "ascend", "ptx"])
@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.stem)
def test_emit_kernel(path: Path, target: str, capsys) -> None:
    assert main([str(path), "--emit=kernel", "--target", target]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f'target = "{target}"' in out


def _calls(node: object) -> Iterator[str]:
    """The functions called and the binary operators used in an AST."""
    if isinstance(node, ast.Call):
        yield node.func
    if isinstance(node, ast.BinOp):
        yield node.op
    if dataclasses.is_dataclass(node):
        for f in dataclasses.fields(node):
            yield from _calls(getattr(node, f.name))
    elif isinstance(node, list):
        for item in node:
            yield from _calls(item)


def test_the_corpus_calls_every_built_in() -> None:
    called = set()
    for path in CORPUS_FILES:
        called |= set(_calls(parse(path.read_text(), path.name)))
    assert (set(BUILTINS) | {"@"}) - called == set()


def _facets(op: ir.Operation) -> Iterator[tuple]:
    """What a tensor-level op exercises that its name does not tell."""
    attrs = op.attributes
    if op.name == "tile.cmp":
        yield "cmp", ir.StringAttr(attrs["predicate"]).value
    elif op.name == "tile.cast":
        yield "cast", tensor_info(op.operands[0].type).dtype, tensor_info(op.results[0].type).dtype
    elif op.name == "tile.reduce":
        yield "reduce", ir.StringAttr(attrs["kind"]).value, ir.BoolAttr(attrs["keepdims"]).value
        yield "reduce axes", min(len(attrs["axes"]), 2)
    elif op.name == "tile.softmax":
        yield "softmax axis", "last" if ir.IntegerAttr(attrs["axis"]).value == -1 else "other"


def test_the_corpus_covers_every_comparison_cast_and_reduction() -> None:
    dtypes = ("float16", "bfloat16", "float32", "int32")
    want = {("cmp", p) for p in ("lt", "le", "gt", "ge", "eq", "ne")}
    want |= {("cast", a, b) for a in dtypes for b in dtypes if a != b}
    want |= {("reduce", k, keep) for k in ("sum", "mean", "max", "min", "var")
             for keep in (True, False)}
    want |= {("reduce axes", 1), ("reduce axes", 2), ("softmax axis", "last"),
             ("softmax axis", "other")}
    seen = set()
    for key in PROGRAMS:
        for function in tensor_level(key).body.operations:
            for op in function.regions[0].blocks[0].operations:
                seen |= set(_facets(op.operation))
    assert want - seen == set()

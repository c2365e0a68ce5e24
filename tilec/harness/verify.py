"""``tilec verify``: every function of a ``.tile`` file, built for a target, against the
reference semantics.

In: a ``.tile`` file and :class:`~tilec.driver.CompileOptions`.  Out: a :class:`Report`, one
:class:`Case` per function and shape binding, streamed as a table as the cases run (max abs /
rel error per case), and ``ok`` when every case agrees with the reference within the numerical contract
(:mod:`tilec.harness.numerics`): the tolerances plus the reference's rounding allowance
(:mod:`tilec.harness.allowance`); a failure says how many elements lie beyond the tolerances
and how many of those the allowance explains.

The library is built with :func:`tilec.api.compile_string` and called through the Python
runtime, as a user would; the reference runs on the tensor-level IR (after
``tile-shape-template``, so that ``--no-generic`` refuses what the library refuses).  Cases,
on fixed-seed random inputs: each free symbol at 1, 7, 127, 255, 1000 and 4097 with the others
at 7, all of them at each of those sizes, every template binding, ``...`` standing for (),
(1,), (3, 5) and (2, 7, 127), and a few random shapes.  A case whose arguments and results
hold more than ``max_elements`` elements is skipped (and said so).  Arguments that the
reference refuses (a failing run-time check, a rank ``...`` cannot have) must be refused by
the library too: such a case is "rejected", which agrees.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, TextIO

import numpy as np

from .. import passes  # noqa: F401  (registers tile-shape-template)
from ..dims import Dim
from ..driver import CompileOptions, read_source
from ..frontend import compile_source
from ..pipeline import parse_pipeline, run_pipeline
from ..runtime.loader import Function
from .numerics import NUMPY_DTYPES, compare
from .reference import ReferenceError, allowed

SIZES = (1, 7, 127, 255, 1000, 4097)
BASE = 7
LEADS = ((), (1,), (3, 5), (2, 7, 127))
LEAD_FOR_SYMBOLS = (3, 5)
RANDOM_CASES = 3


@dataclass(frozen=True)
class Case:
    function: str
    label: str                 # the binding: "seq=7 hidden=4097", "...=(3, 5)"
    shapes: str                # the tensor arguments' shapes
    status: str                # "pass", "rejected" (both refuse the arguments) or "FAIL"
    max_abs: float | None = None
    max_rel: float | None = None
    detail: str = ""           # the first mismatch, or why the arguments were refused

    @property
    def ok(self) -> bool:
        return self.status != "FAIL"


@dataclass
class Report:
    cases: list[Case]
    skipped: list[str]         # cases over the size cap, or impossible shapes
    interrupted: bool = False  # stopped by Ctrl-C: the cases so far

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.cases) and not self.interrupted

    def table(self) -> str:
        """The whole report, as :func:`verify` streams it: :class:`Table`'s lines."""
        table = Table.fitting([c.function for c in self.cases], [c.label for c in self.cases])
        return "\n".join([table.head(), *map(table.row, self.cases), *table.tail(self)])


COLUMNS = ("function", "case", "max abs", "max rel", "result", "shapes")
# what each column and count means: `tilec verify --help` prints it
EXPLAINED = """\
columns:
  function  the function of FILE
  case      its shape binding: each free symbol's value, ... the extents it stands for
  max abs   the largest |library - reference| over the elements finite in both
  max rel   the largest |library - reference| / |reference| (where the reference is not 0)
  result    pass: within the numerical contract (README, Numerics): the tolerance plus
            the reference's rounding allowance;
            rejected: both the reference and the library refused the arguments (a run-time
            shape check fails, or ... cannot have that rank), which agrees;
            FAIL: beyond the contract, or only one of the two refused (below the table:
            how many elements lie beyond the tolerance, how many of them the allowance
            explains, and the first mismatch)
  shapes    the shapes of the tensor arguments
counts (last line): cases run, and of them passed, rejected by both and failed; skipped:
cases not run because their arguments and results hold more than --max-elements elements,
or because a dimension is not a non-negative integer there (each listed)
exit status: 0 when no case failed, 1 otherwise, 130 on Ctrl-C (the cases so far are shown)"""


@dataclass(frozen=True)
class Table:
    """The report's table, one line per case as it comes: the function and case columns are
    as wide as the widest to come, the shapes last and unpadded."""
    function_width: int
    case_width: int

    @staticmethod
    def fitting(functions: list[str], labels: list[str]) -> "Table":
        return Table(max(map(len, [COLUMNS[0], *functions])),
                     max(map(len, [COLUMNS[1], *labels])))

    def _line(self, cells: tuple[str, ...]) -> str:
        widths = (self.function_width, self.case_width, 9, 9, 8)
        return "  ".join(cell.ljust(w) for cell, w in zip(cells, widths + (0,))).rstrip()

    def head(self) -> str:
        return self._line(COLUMNS)

    def row(self, c: Case) -> str:
        return self._line((c.function, c.label, _number(c.max_abs), _number(c.max_rel),
                           c.status, c.shapes))

    def tail(self, report: Report) -> list[str]:
        lines = [f"  {c.function} {c.label}: {c.detail}" for c in report.cases
                 if c.status == "FAIL"]
        lines += [f"skipped: {note}" for note in report.skipped]
        counts = {s: sum(c.status == s for c in report.cases)
                  for s in ("pass", "rejected", "FAIL")}
        lines.append(f"{len(report.cases)} cases: {counts['pass']} passed, "
                     f"{counts['rejected']} rejected by both, {counts['FAIL']} failed; "
                     f"{len(report.skipped)} skipped")
        if report.interrupted:
            lines.append("interrupted (Ctrl-C): the cases above are all that ran")
        return lines


def _number(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def _bindings(fn: Function, rng: np.random.Generator) -> list[tuple[dict[str, int], tuple]]:
    """(symbol values, the extents '...' stands for as the user sees it) of every case."""
    symbols = fn.symbols
    rank_generic = fn.lead is not None
    lead = LEAD_FOR_SYMBOLS if rank_generic else ()
    base = {s: BASE for s in symbols}
    found: list[tuple[dict[str, int], tuple]] = []

    def add(values: dict[str, int], lead: tuple) -> None:
        if (values, lead) not in found:
            found.append((values, lead))

    if fn.generic:
        add(base, lead)
        for s, v in itertools.product(symbols, SIZES):
            add({**base, s: v}, lead)
        if len(symbols) > 1:
            for v in SIZES:
                add({s: v for s in symbols}, lead)
        if rank_generic:
            for extents in LEADS + tuple((3, v) for v in SIZES):
                add(base, extents)
        for _ in range(RANDOM_CASES):
            extents = tuple(int(x) for x in rng.integers(1, 10, size=rng.integers(0, 4)))
            add({s: int(rng.integers(1, 65)) for s in symbols}, extents if rank_generic else ())
    for variant in fn.variants:
        add({**base, **variant.binding}, lead)
    return found


def _label(values: dict[str, int], lead: tuple, fn: Function) -> str:
    parts = [f"{s}={v}" for s, v in values.items()]
    if fn.lead is not None:
        parts.append(f"...={lead}")
    return " ".join(parts) or "(fixed shapes)"


def _shape(declared: tuple, env: dict[str, int], lead: tuple,
           peeled: list[str]) -> tuple[int, ...] | str:
    """The shape of an array for ``declared`` (an IR shape) as the user sees it: ``lead``
    stands for ``...`` and the symbols peeled off it; or why there is none (a dimension that
    is not a non-negative integer)."""
    out: list[int] = []
    rest = list(declared)
    if rest and rest[0] == "...":
        out.extend(lead)
        rest = rest[1:]
        for p in peeled:
            if rest and rest[0] == Dim.sym(p):
                rest = rest[1:]
    for d in rest:
        value = d.evaluate(env)
        if value.denominator != 1 or value < 0:
            return f"dimension {d} is {value}"
        out.append(int(value))
    return tuple(out)


def _case(fn: Function, module: Any, values: dict[str, int], lead: tuple,
          rng: np.random.Generator, max_elements: int) -> Case | str:
    """Run one case; a string says why it was skipped."""
    label = _label(values, lead, fn)
    peeled = fn.lead or []
    env = dict(values)
    if len(lead) >= len(peeled):
        env.update(zip(peeled, lead[len(lead) - len(peeled):]))
    variant = next((v for v in fn.variants
                    if all(values.get(s) == x for s, x in v.binding.items())), None)
    param_shapes = [p.shape for p in fn.params] if fn.generic else list(variant.params)
    result_shapes = [s for _, s in fn.results] if fn.generic else list(variant.results)
    tensors: dict[int, tuple[int, ...]] = {}
    for i, (p, declared) in enumerate(zip(fn.params, param_shapes)):
        if p.kind == "tensor":
            shape = _shape(declared, env, lead, peeled)
            if isinstance(shape, str):
                return f"{fn.name} {label}: argument '{p.name}' {shape}"
            tensors[i] = shape
    results = [_shape(declared, env, lead, peeled) for declared in result_shapes]
    elements = sum(int(np.prod(s, dtype=np.float64)) for s in list(tensors.values()) + results
                   if not isinstance(s, str))
    if elements > max_elements:
        return f"{fn.name} {label}: {elements} elements > {max_elements}"
    args = [_random(tensors[i], p.dtype, rng) if i in tensors else
            p.default if p.default is not None else (3 if p.dtype == "int32" else 0.5)
            for i, p in enumerate(fn.params)]
    shown = " ".join(str(s) for s in tensors.values())
    try:
        want, allowances = allowed(module, fn.name, *args)
    except ReferenceError as e:
        want, allowances = e, ()
    try:
        got = fn(*args)
    except (TypeError, ValueError, RuntimeError) as e:
        got = e
    if isinstance(want, Exception) or isinstance(got, Exception):
        if isinstance(want, Exception) and isinstance(got, Exception):
            return Case(fn.name, label, shown, "rejected", detail=str(want))
        detail = (f"the reference refused ({want}) but the library did not"
                  if isinstance(want, Exception) else f"the library refused: {got}")
        return Case(fn.name, label, shown, "FAIL", detail=detail)
    if not isinstance(got, tuple):
        got = (got,)
    compared = [compare(g, w, dtype, allowance=d)
                for g, w, d, (dtype, _) in zip(got, want, allowances, fn.results)]
    bad = [c for c in compared if not c.ok]
    return Case(fn.name, label, shown, "FAIL" if bad else "pass",
                max(c.max_abs for c in compared), max(c.max_rel for c in compared),
                str(bad[0]) if bad else "")


def _random(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    if dtype == "int32":
        return rng.integers(-50, 50, size=shape, dtype=np.int32)
    return rng.standard_normal(shape).astype(NUMPY_DTYPES[dtype])


def _seconds(t: float) -> str:
    return f"{t:.1f} s" if t >= 1 else f"{t * 1000:.0f} ms"


def verify(path: str, options: CompileOptions, *, max_elements: int = 1 << 22, seed: int = 0,
           out: TextIO | None = None, progress: TextIO | None = None) -> Report:
    """Build ``path`` with ``options`` and run every function against the reference.  With
    ``out``, the table goes there line by line as the cases run (flushed), then its tail;
    with ``progress``, how long the build and each function took.  Ctrl-C stops the cases:
    the report holds those that ran and says it was interrupted."""
    from ..api import compile_string

    text = read_source(path)
    fields = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)
              if f.name not in ("emit", "target")}
    start = time.perf_counter()
    library = compile_string(text, path, options.target, **fields)
    module = compile_source(text, path, options.sema())
    with module.context:
        flag = "true" if options.no_generic else "false"
        run_pipeline(module, parse_pipeline(f"tile-shape-template{{no-generic={flag}}}"))
    _say(progress, f"verify {Path(path).name}: built for {options.target} in "
                   f"{_seconds(time.perf_counter() - start)}")
    rng = np.random.default_rng(seed)
    plan = [(fn, _bindings(fn, rng)) for fn in library.functions.values()]
    table = Table.fitting([fn.name for fn, _ in plan],
                          [_label(v, lead, fn) for fn, bindings in plan for v, lead in bindings])
    report = Report([], [])
    _say(out, table.head())
    with _ctrl_c() as stopped:
        try:
            for fn, bindings in plan:
                _run_function(fn, bindings, module, rng, max_elements, report, table, out,
                              progress, Path(path).name, stopped)
        except KeyboardInterrupt:
            report.interrupted = True
        report.interrupted = report.interrupted or stopped()
    for line in table.tail(report):
        _say(out, line)
    return report


@contextlib.contextmanager
def _ctrl_c() -> Iterator[Callable[[], bool]]:
    """Whether Ctrl-C came, recorded as well as raised: a KeyboardInterrupt raised where
    Python swallows it (in a finalizer the garbage collector runs) would otherwise be lost
    and the run go on to the end."""
    seen = [False]

    def interrupted(signum: int, frame: Any) -> None:
        seen[0] = True
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    before = signal.signal(signal.SIGINT, interrupted)
    try:
        yield lambda: seen[0]
    finally:
        signal.signal(signal.SIGINT, before)


def _run_function(fn: Function, bindings: list[tuple[dict[str, int], tuple]], module: Any,
                  rng: np.random.Generator, max_elements: int, report: Report, table: Table,
                  out: TextIO | None, progress: TextIO | None, file: str,
                  stopped: Callable[[], bool]) -> None:
    start = time.perf_counter()
    before = len(report.cases)
    for values, lead in bindings:
        if stopped():
            raise KeyboardInterrupt
        case = _case(fn, module, values, lead, rng, max_elements)
        if isinstance(case, str):
            report.skipped.append(case)
        else:
            report.cases.append(case)
            _say(out, table.row(case))
    mine = report.cases[before:]
    _say(progress, f"verify {file}: {fn.name}: {len(mine)} cases, "
                   f"{sum(not c.ok for c in mine)} failed ({_seconds(time.perf_counter() - start)})")


def _say(stream: TextIO | None, line: str) -> None:
    if stream is not None:
        print(line, file=stream, flush=True)

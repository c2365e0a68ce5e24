"""Run one generated program through every oracle and say what disagreed.

In: a :class:`~tilec.fuzz.program.Program` and the targets.  Out: a list of
:class:`Failure` (empty when all agree).  Oracles:

- ``reference``: each target's library against the reference interpreter, within the
  numerical contract (:func:`tilec.harness.numerics.compare`, with the reference's rounding
  allowance); a refusal must be mutual;
- ``O0-vs-O2``: the same, named so when ``cpu`` and ``cpu-O0`` are both run and only one of
  them disagrees with the reference;
- ``cache``: an identical compile must hit the cache, and the cached library must give
  bitwise the results of a fresh build (``cache=False``);
- ``threads``: the cached library loaded again with ``TILEC_NUM_THREADS=1`` must give bitwise
  the results of the pool's threads;
- ``ptxas``: ``--target ptx`` builds (ptxas accepts the PTX); nothing runs without a GPU;
- ``frontend``/``compile``/``crash``: a valid program rejected, or an internal error.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import passes  # noqa: F401  (registers tile-shape-template)
from ..api import compile_string
from ..diagnostics import DiagnosticSink, TilecError
from ..driver import CompileOptions, build
from ..frontend import compile_source
from ..harness.numerics import NUMPY_DTYPES, compare
from ..harness import reference as _reference
from ..harness.reference import ReferenceError
from ..pipeline import parse_pipeline, run_pipeline
from ..runtime.loader import load
from .program import Program

# target name on the command line -> (--target, -O level)
TARGETS = {"cpu": ("cpu", 2), "cpu-O0": ("cpu", 0), "ascend-sim": ("ascend-sim", 2),
           "ptx": ("ptx", 2)}
HOST, HOST_O0 = "cpu", "cpu-O0"   # the target the cache and threads oracles run, and its -O0
BUILD_ONLY = frozenset({"ptx"})   # built (ptxas), not run: no GPU
FILE = "fuzz.tile"


def _host_arch() -> str:
    """The cpu code this machine runs: built alone, it halves LLVM's time per program."""
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return "x86-64-v3"
    return "x86-64-v4" if all(f in flags for f in ("avx512f", "avx512bw", "avx512dq",
                                                   "avx512vl", "avx512cd")) else "x86-64-v3"


ARCH = _host_arch()


@dataclass(frozen=True)
class Failure:
    oracle: str
    target: str
    message: str

    @property
    def kind(self) -> str:
        return f"{self.oracle}/{self.target}"


def arguments(program: Program) -> dict[str, Any]:
    """The entry's arguments by name, fixed by the program's seed; scalars left to their
    default are absent."""
    rng = np.random.default_rng(program.seed)
    sizes = program.sizes
    args: dict[str, Any] = {}
    for p in program.entry.params:
        if p.scalar:
            if p.passed:
                args[p.name] = 2 if p.type.dtype == "int32" else 0.75
            continue
        shape = (*(program.lead if p.type.generic else ()),
                 *(int(d.evaluate(sizes)) for d in p.type.certain))
        dtype = program.dtype(p.type.dtype)
        if dtype == "int32":
            args[p.name] = rng.integers(-50, 51, size=shape, dtype=np.int32)
        else:
            values = np.asarray(np.clip(rng.standard_normal(shape), -4.0, 4.0))
            args[p.name] = values.astype(NUMPY_DTYPES[dtype])
    return args


def _tuple(x: Any) -> tuple:
    return x if isinstance(x, tuple) else (x,)


def reference(program: Program, text: str) -> tuple[Any, Any]:
    """(the reference's results as a tuple, or the ReferenceError refusing the arguments;
    what the comparison takes besides, :func:`_expected`).  Raises :class:`TilecError` when
    the front end rejects."""
    module = compile_source(text, FILE, CompileOptions().sema())
    with module.context:
        run_pipeline(module, parse_pipeline("tile-shape-template{no-generic=false}"))
    try:
        return _expected(module, program.entry_name, arguments(program))
    except ReferenceError as e:
        return e, None


def _expected(module: Any, name: str, args: dict[str, Any]) -> tuple[tuple, Any]:
    """(the results, the rounding allowance of each)."""
    want, allowances = _reference.allowed(module, name, **args)
    return _tuple(want), allowances


def _compared(k: int, got: Any, want: Any, dtype: str, allowances: Any) -> Any:
    return compare(got, want, dtype, allowance=allowances[k])


def _compare(target: str, got: Any, want: Any, others: Any, program: Program) -> list[Failure]:
    if isinstance(want, Exception) or isinstance(got, Exception):
        if isinstance(want, Exception) and isinstance(got, Exception):
            return []
        message = (f"the reference refused ({want}) but the library did not"
                   if isinstance(want, Exception) else f"the library refused: {got}")
        return [Failure("reference", target, message)]
    failures = []
    for k, (g, w, t) in enumerate(zip(_tuple(got), want, program.entry.result_types)):
        try:
            c = _compared(k, g, w, program.dtype(t.dtype), others)
        except ValueError as e:
            failures.append(Failure("reference", target, f"result {k}: {e}"))
            continue
        if not c.ok:
            failures.append(Failure("reference", target, f"result {k}: {c}"))
    return failures


def _call(library: Any, program: Program) -> Any:
    """The entry's results: through the dtype template's dispatch where a tensor parameter
    is of its type, else its instance (the dispatch refuses to guess)."""
    decides = any(not p.scalar and p.type.dtype == "float32" for p in program.entry.params)
    name = program.entry.name if decides or not program.dtype_template else program.entry_name
    try:
        return _tuple(library[name](**arguments(program)))
    except (TypeError, ValueError, RuntimeError) as e:
        return e


def _build(text: str, target: str, cache: bool = True) -> Any:
    backend, level = TARGETS[target]
    arch = {"arch": ARCH} if backend == TARGETS[HOST][0] else {}
    return compile_string(text, FILE, backend, opt_level=level, cache=cache,
                          sink=DiagnosticSink(None), **arch)


def same_bits(a: Any, b: Any) -> bool:
    if isinstance(a, Exception) or isinstance(b, Exception):
        return isinstance(a, Exception) and isinstance(b, Exception)
    return all(np.shape(x) == np.shape(y) and np.asarray(x).tobytes() == np.asarray(y).tobytes()
               for x, y in zip(a, b))


def _one_thread(library: Any, programs: list[Program]) -> list[Any]:
    """The results of ``programs`` from a copy of ``library`` run with TILEC_NUM_THREADS=1
    (a copy: a library loaded again is the same handle, with its pool already started)."""
    with tempfile.TemporaryDirectory(prefix="tilec-fuzz-") as tmp:
        copy = shutil.copy(library.path, os.path.join(tmp, "one_thread.so"))
        before = os.environ.get("TILEC_NUM_THREADS")
        os.environ["TILEC_NUM_THREADS"] = "1"
        try:
            single = load(copy)
            return [_call(single, p) for p in programs]
        finally:
            if before is None:
                del os.environ["TILEC_NUM_THREADS"]
            else:
                os.environ["TILEC_NUM_THREADS"] = before


def cache_and_threads(programs: list[Program], text: str, gots: list[Any],
                      library: Any, fresh: bool = True) -> list[list[Failure]]:
    """The cache and threads oracles on ``library`` (the cpu build of ``text``, from the
    cache), one list of failures per program; ``fresh``: also against a fresh build."""
    failures: list[list[Failure]] = [[] for _ in programs]
    options = CompileOptions(target="cpu", opt_level=2, arch=ARCH)
    if not build(text, FILE, options, DiagnosticSink(None), "fuzz", use_cache=True).hit:
        failures[0].append(Failure("cache", "cpu", "an identical compile missed the cache"))
    rebuilt = _build(text, "cpu", cache=False) if fresh else None
    for k, p in enumerate(programs if rebuilt else []):
        if not same_bits(_call(rebuilt, p), gots[k]):
            failures[k].append(Failure("cache", "cpu", "the cached library's results differ "
                                                       "from a fresh build's"))
    for k, one in enumerate(_one_thread(library, programs)):
        if not same_bits(one, gots[k]):
            failures[k].append(Failure("threads", "cpu", "TILEC_NUM_THREADS=1 gives other bits "
                                                         "than all threads"))
    return failures


def check(program: Program, targets: list[str], extra: bool = True) -> list[Failure]:
    """Every oracle on ``program``; ``extra``: also the cache and threads oracles."""
    return check_batch([program], targets, extra)[0]


def check_batch(programs: list[Program], targets: list[str], extra: bool = True,
                fresh: bool = True) -> list[list[Failure]]:
    """Every oracle on each of ``programs``, built together (one file, one library per
    target; a batch that fails to build is bisected until each part builds or is one
    program).  ``extra``: the
    cache and threads oracles too; ``fresh``: the cache's against a fresh build."""
    if len(programs) > 1:
        programs = [p.renamed(f"p{k}_") for k, p in enumerate(programs)]
    failures: list[list[Failure]] = [[] for _ in programs]
    refs: dict[int, tuple[Any, list]] = {}
    for k, p in enumerate(programs):
        try:
            refs[k] = reference(p, p.text())
        except TilecError as e:
            failures[k].append(Failure("frontend", "reference", f"a valid program rejected: {e}"))
        except Exception as e:
            failures[k].append(Failure("crash", "reference", f"{type(e).__name__}: {e}"))
    _check_built(programs, list(refs), refs, targets, (extra, fresh), failures)
    for k in refs:
        failures[k] = _o0_vs_o2(failures[k], targets)
    return failures


def _check_built(programs: list[Program], live: list[int], refs: dict, targets: list[str],
                 extra: tuple[bool, bool], failures: list[list[Failure]]) -> None:
    """The target oracles on programs ``live``, built together; when they do not build for
    some target, bisected until each part builds or is one program (which then fails)."""
    if len(live) > 1 and any(_build_fails(programs, live, t) for t in targets):
        half = len(live) // 2
        for part in (live[:half], live[half:]):
            _check_built(programs, part, refs, targets, extra, failures)
        return
    for target in targets:
        _target(programs, live, refs, target, extra, failures)


def _build_fails(programs: list[Program], live: list[int], target: str) -> bool:
    try:
        _build(_text(programs, live), target)
    except Exception:
        return True
    return False


def _text(programs: list[Program], live: list[int]) -> str:
    return "\n".join(programs[k].text() for k in live)


def _target(programs: list[Program], live: list[int], refs: dict, target: str,
            extra: tuple[bool, bool], failures: list[list[Failure]]) -> None:
    text = _text(programs, live)
    try:
        library = _build(text, target)
    except TilecError as e:
        oracle = "ptxas" if target in BUILD_ONLY else "compile"
        failures[live[0]].append(Failure(oracle, target, f"a valid program rejected: {e}"))
        return
    except Exception as e:  # an internal error is what the fuzzer is here to find
        failures[live[0]].append(Failure("crash", target, f"{type(e).__name__}: {e}"))
        return
    if target in BUILD_ONLY:
        return
    gots = [_call(library, programs[k]) for k in live]
    for k, got in zip(live, gots):
        failures[k] += _compare(target, got, *refs[k], programs[k])
    if target == HOST and extra[0]:
        found = cache_and_threads([programs[k] for k in live], text, gots, library, extra[1])
        for k, more in zip(live, found):
            failures[k] += more


def _o0_vs_o2(failures: list[Failure], targets: list[str]) -> list[Failure]:
    bad = {f.target for f in failures if f.oracle == "reference"}
    pair = {HOST, HOST_O0}
    if not pair <= set(targets) or len(bad & pair) != 1:
        return failures
    return [Failure("O0-vs-O2", f.target, f.message)
            if f.oracle == "reference" and f.target in pair else f
            for f in failures]

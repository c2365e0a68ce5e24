"""``tilec fuzz``: generate programs, run the oracles in worker processes, reduce and
deduplicate the failures, and summarise.

In: a count, a seed, targets, a number of jobs, an output directory.  Out: a :class:`Summary`
(how often each construct occurred, failures by kind, one reduced ``.tile`` file per distinct
signature written to the output directory), with a progress line while it runs.  Program
``i`` of seed ``S`` is always the same program (:func:`~tilec.fuzz.generate.generate`), so
``--seed S --count N`` is reproducible on any machine.  The compile cache is a private one
for the run (the cache oracle needs entries no other compile made), removed at the end.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import re
import signal
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from .generate import CONSTRUCTS, DTYPE_TEMPLATES, generate
from .oracles import Failure, check_batch
from .reduce import normalized, reduce

# the constructs of language.md that a run should cover (the summary flags any under 2%)
REQUIRED = ("elementwise", "broadcast", "reduce", "keepdims", "slice", "slice_symbolic",
            "concat", "transpose", "reshape", "where", "cast", "scalar", "scalar_default",
            "several_results", "call", "ellipsis", "shape_template", "matmul", "softmax",
            "normalize")
_GENERATED = {name for name, _, _ in CONSTRUCTS}
REQUIRED += tuple(c for c in ("iota", "dim", "argmax") if c in _GENERATED)   # language 1.1
REQUIRED += ("inf",) if "iota" in _GENERATED else ()
REQUIRED += ("dtype_template",) if DTYPE_TEMPLATES else ()
COVERAGE = 0.02
BATCH = 48          # programs per build: a build's fixed cost (g++ for ascend-sim) is shared
FRESH_EVERY = 3     # batches: one in this many is also built afresh (the cache oracle)
REDUCTIONS = 3      # reductions per (kind, message) in a run


@dataclass(frozen=True)
class Found:
    """A failure of one program, reduced."""
    failure: Failure
    index: int
    program: str            # the reduced program's text
    constructs: tuple[str, ...]
    reduced: bool = True    # False: a failure like one already reduced, left as it came

    @property
    def signature(self) -> tuple[str, str, tuple[str, ...]]:
        return self.failure.kind, normalized(self.failure.message), self.constructs


@dataclass(frozen=True)
class Record:
    index: int
    constructs: frozenset[str]
    found: tuple[Found, ...]
    seconds: float


def _coarse(constructs: frozenset[str]) -> tuple[str, ...]:
    return tuple(sorted(c for c in constructs if ":" not in c))


def batch(seed: int, indices: list[int], targets: list[str],
          reduced: Counter | None = None) -> list[Record]:
    """Generate programs ``indices`` of ``seed``, check them built together, and reduce what
    fails: each (kind, message) at most :data:`REDUCTIONS` times over the run (``reduced``
    counts those done before this batch)."""
    start = time.monotonic()
    programs = [generate(seed, i) for i in indices]
    fresh = indices[0] // BATCH % FRESH_EVERY == 0 if indices else False
    results = check_batch(programs, targets, fresh=fresh)
    seconds = (time.monotonic() - start) / max(len(indices), 1)
    reduced = Counter(reduced or {})
    records = []
    for index, program, failures in zip(indices, programs, results):
        found = []
        for failure in {f.kind: f for f in failures}.values():
            key = (failure.kind, normalized(failure.message))
            small = None
            if reduced[key] < REDUCTIONS:
                reduced[key] += 1
                small = reduce(program, failure, targets)
            text = (small or program).text()
            found.append(Found(failure, index, _annotated(text, failure, seed, index),
                               _coarse((small or program).all_constructs()), small is not None))
        records.append(Record(index, program.all_constructs(), tuple(found), seconds))
    return records


def _annotated(text: str, failure: Failure, seed: int, index: int) -> str:
    message = failure.message.splitlines()[0] if failure.message else ""
    return (f"// tilec fuzz --seed {seed}: program {index}, oracle {failure.oracle}, "
            f"target {failure.target}\n// {message[:300]}\n{text}")


@dataclass
class Summary:
    count: int = 0
    constructs: Counter = field(default_factory=Counter)
    failed: Counter = field(default_factory=Counter)          # kind -> programs
    unique: dict[tuple, Found] = field(default_factory=dict)  # signature -> first found
    keys: Counter = field(default_factory=Counter)            # (kind, message) -> programs
    seconds: float = 0.0
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return not self.keys and not self.interrupted

    def add(self, record: Record) -> None:
        self.count += 1
        self.constructs.update(record.constructs)
        self.failed.update({f.failure.kind for f in record.found})
        for f in record.found:
            if f.reduced:
                self.unique.setdefault(f.signature, f)
            self.keys[(f.failure.kind, normalized(f.failure.message))] += 1

    def uncovered(self) -> list[str]:
        return [c for c in REQUIRED if self.constructs[c] < COVERAGE * self.count]

    def lines(self) -> list[str]:
        n = max(self.count, 1)
        out = [f"{self.count} programs in {self.seconds:.0f} s"
               + (" (interrupted)" if self.interrupted else ""), "constructs (% of programs):"]
        coarse = sorted((c for c in self.constructs if ":" not in c), key=lambda c: c)
        out += [f"  {c:18} {100 * self.constructs[c] / n:5.1f}" for c in coarse]
        fine = sorted(c for c in self.constructs if ":" in c)
        out.append("  " + "  ".join(f"{c} {100 * self.constructs[c] / n:.1f}" for c in fine))
        missing = self.uncovered()
        if not self.count:
            out.append("no program ran")
        else:
            out.append(f"under {COVERAGE:.0%}: {', '.join(missing)}" if missing
                       else f"every construct in at least {COVERAGE:.0%} of the programs")
        out.append("failures by kind (programs): " + (", ".join(
            f"{k} {v}" for k, v in sorted(self.failed.items())) or "none"))
        out.append(f"distinct failures: {len(self.keys)} (kind, message) pairs, "
                   f"{len(self.unique)} reduced programs")
        return out


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")


def write_failures(summary: Summary, out: Path, written: int = 0) -> int:
    """Write the reduced failures from the ``written``-th on; the count written so far."""
    found = list(summary.unique.values())[written:]
    if found:
        out.mkdir(parents=True, exist_ok=True)
    for i, f in enumerate(found, start=written):
        (out / f"{i:03d}-{_slug(f.failure.kind)}.tile").write_text(f.program)
    return written + len(found)


@contextlib.contextmanager
def _private_cache() -> Iterator[None]:
    before = os.environ.get("TILEC_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="tilec-fuzz-cache-") as tmp:
        os.environ["TILEC_CACHE_DIR"] = tmp
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("TILEC_CACHE_DIR", None)
            else:
                os.environ["TILEC_CACHE_DIR"] = before


def _next(done: queue.Queue) -> Any:
    """The next batch's records; polled, so that Ctrl-C (SIGINT) interrupts the wait."""
    while True:
        try:
            return done.get(timeout=0.5)
        except queue.Empty:
            continue


def _records(programs: range, seed: int, targets: list[str], jobs: int,
             summary: Summary) -> Iterator[list[Record]]:
    chunks = [list(programs[i:i + BATCH]) for i in range(0, len(programs), BATCH)]
    if jobs <= 1:
        for chunk in chunks:
            yield batch(seed, chunk, targets, summary.keys)
        return
    done: queue.Queue = queue.Queue()
    # Ctrl-C reaches the whole process group: the workers leave it to this process, which
    # stops them (a worker interrupted itself would die with a traceback and be replaced)
    pool = multiprocessing.get_context("spawn").Pool(jobs, signal.signal,
                                                     (signal.SIGINT, signal.SIG_IGN))
    try:
        pending, running = list(reversed(chunks)), 0
        while pending or running:
            while pending and running < jobs:   # each batch sees the reductions done so far
                pool.apply_async(batch, (seed, pending.pop(), targets, summary.keys),
                                 callback=done.put, error_callback=done.put)
                running += 1
            result = _next(done)
            running -= 1
            if isinstance(result, BaseException):
                raise result
            yield result
        pool.close()
    finally:
        pool.terminate()   # Ctrl-C or an error: the running batches stop too


def fuzz(count: int, seed: int, targets: list[str], *, jobs: int = 1, out: Path | None = None,
         progress: TextIO | None = None, first: int = 0) -> Summary:
    """Run programs ``first`` to ``first + count - 1`` of ``seed`` on ``targets``; failures
    reduced into ``out``."""
    summary = Summary()
    start = time.monotonic()
    written = 0
    with _private_cache():
        try:
            for records in _records(range(first, first + count), seed, targets, jobs,
                                    summary):
                for record in records:
                    summary.add(record)
                summary.seconds = time.monotonic() - start
                _progress(progress, summary, count)
                if out is not None:   # as they come: a long run's failures are usable early
                    written = write_failures(summary, out, written)
        except KeyboardInterrupt:
            summary.interrupted = True
    summary.seconds = time.monotonic() - start
    if progress is not None and progress.isatty():
        print(file=progress)
    return summary


def _progress(stream: TextIO | None, s: Summary, count: int) -> None:
    if stream is None:
        return
    rate = s.count / max(s.seconds, 1e-9)
    line = (f"fuzz [{s.count}/{count}] {rate:.2f} programs/s, "
            f"eta {(count - s.count) / max(rate, 1e-9):.0f} s, "
            f"{sum(s.failed.values())} failures ({len(s.keys)} kinds of message)")
    if stream.isatty():
        print("\r" + line, end="", file=stream, flush=True)
    else:
        print(line, file=stream, flush=True)

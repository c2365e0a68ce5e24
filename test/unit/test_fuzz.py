"""``tilec fuzz``: the generator, the oracles, the reducer, the command, and the CI smoke.

The smoke (marked ``fuzz``; ``pytest -m fuzz`` selects it) runs the CI figure with a fixed
seed: 100 programs on ``cpu`` and 20 on ``ascend-sim`` (about 70 s of CPU time);
``--fuzz-long`` runs ten times as many.
"""
from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import REPO

from tilec.cli import main
from tilec.dialect.ops import BINARY_OPS, REDUCE_KINDS, UNARY_OPS
from tilec.frontend import compile_source
from tilec.fuzz import oracles
from tilec.dims import ELLIPSIS, Dim
from tilec.fuzz.generate import broadcast, generate
from tilec.fuzz.oracles import Failure, check
from tilec.fuzz.program import Program
from tilec.fuzz.reduce import reduce
from tilec.fuzz.replay import parse, replay
from tilec.fuzz.run import COVERAGE, REQUIRED, Summary, fuzz

SMOKE_SEED = 16
REGRESSIONS = sorted((REPO / "test" / "unit" / "fuzz").glob("*.tile"))
REPLAY_TARGETS = ["cpu", "cpu-O0", "ascend-sim"]


def _regression(path: Path) -> Any:
    """A reduced program; ``// XFAIL: REASON`` in it marks a bug another issue owns."""
    reason = re.search(r"^// XFAIL: (.*)$", path.read_text(), re.M)
    marks = [pytest.mark.xfail(reason=reason.group(1), strict=True)] if reason else []
    return pytest.param(path, id=path.stem, marks=marks)
GENERATED = 400


@pytest.fixture(scope="module")
def programs() -> list[Program]:
    return [generate(7, i) for i in range(GENERATED)]


def test_program_i_of_a_seed_is_always_the_same() -> None:
    assert generate(3, 5).text() == generate(3, 5).text()
    assert generate(3, 5).text() != generate(3, 6).text()
    assert generate(3, 5).text() != generate(4, 5).text()


def test_broadcast_of_two_shapes() -> None:
    n, d, one = Dim.sym("n"), Dim.sym("d"), Dim.const(1)
    assert broadcast((n, one), (one, d)) == (n, d)
    assert broadcast((n, d), (d,)) == (n, d)
    assert broadcast((ELLIPSIS, n, d), (one, d)) == (ELLIPSIS, n, d)
    assert broadcast((ELLIPSIS, d), (n, d)) is None      # would reach into "..."
    assert broadcast((ELLIPSIS, n, d), (ELLIPSIS, d)) is None   # found by tilec fuzz
    assert broadcast((n,), (d,)) is None                 # two symbols: a run-time question


def test_generated_programs_are_well_typed(programs: list[Program]) -> None:
    for p in programs[:60]:
        compile_source(p.text(), f"program{p.seed}.tile")   # raises TilecError otherwise


def test_a_shape_template_keeps_every_size_valid() -> None:
    """A template value never makes a size negative: its values are the program's own size or
    larger (tilec fuzz --seed 1, program 432: n in [1, 100] for a slice of size n-2)."""
    program = generate(1, 432)
    oracles.reference(program, program.text())     # raises TilecError otherwise


def test_a_dtype_template_program_uses_its_type(programs: list[Program]) -> None:
    """A program whose float32 values pruning dropped is no template: the front end rejects
    a dtype_template that nothing uses (tilec fuzz --seed 1, programs 30 and 94)."""
    for p in [generate(1, 30), generate(1, 94)]:
        compile_source(p.text(), f"program{p.seed}.tile")   # raises TilecError otherwise
    for p in programs:
        body = p.text().split("\n", 2)[-1]
        assert not p.dtype_template or re.search(r"\bT\b", body), p.text()


def test_every_construct_in_enough_programs(programs: list[Program]) -> None:
    summary = Summary()
    for p in programs:
        summary.constructs.update(p.all_constructs())
        summary.count += 1
    assert summary.uncovered() == [], summary.lines()
    assert all(summary.constructs[c] >= COVERAGE * GENERATED for c in REQUIRED)


def test_every_builtin_of_the_op_tables_is_generated(programs: list[Program]) -> None:
    seen = set().union(*(p.all_constructs() for p in programs))
    wanted = ({f"unary:{op}" for op in UNARY_OPS} | {f"binary:{op}" for op in BINARY_OPS}
              | {f"reduce:{k}" for k in REDUCE_KINDS})
    assert wanted - seen == set()


def test_sizes_stay_modest(programs: list[Program]) -> None:
    for p in programs[:100]:
        for array in oracles.arguments(p).values():
            assert np.size(array) <= 1 << 18
            if isinstance(array, np.ndarray) and array.dtype.kind == "f":
                assert np.all(np.abs(array.astype(np.float64)) <= 4.0)


def test_a_wrong_library_is_caught_and_reduced(monkeypatch: pytest.MonkeyPatch) -> None:
    """A library whose output is perturbed (the driver's test_break) fails the reference
    oracle, and the reducer keeps that failure while shrinking the program."""
    build = oracles._build

    def broken(text: str, target: str, cache: bool = True):
        backend, level = oracles.TARGETS[target]
        return oracles.compile_string(text, oracles.FILE, backend, opt_level=level,
                                      cache=cache, test_break="main")

    program = next(p for p in (generate(5, i) for i in range(50))
                   if len(p.entry.body) >= 3 and p.entry.result_types[0].dtype == "float32")
    monkeypatch.setattr(oracles, "_build", broken)
    failures = [f for f in check(program, ["cpu"], extra=False) if f.oracle == "reference"]
    assert failures, "the perturbed library was not caught"
    small = reduce(program, failures[0], ["cpu"], max_runs=6)
    assert len(small.entry.body) < len(program.entry.body)
    monkeypatch.setattr(oracles, "_build", build)


def test_a_batch_that_does_not_build_is_bisected(monkeypatch: pytest.MonkeyPatch) -> None:
    """One program of 16 breaks the batch's build: halves are built until it is alone, in
    far fewer builds than one per program, and only it fails."""
    programs = [generate(7, i) for i in range(16)]
    checked: list[list[int]] = []     # the programs of each library built and run

    def target(programs_: Any, live: list[int], refs: Any, target_: str, extra: Any,
               failures: list[list[Failure]]) -> None:
        checked.append(live)
        if live == [11]:
            failures[11].append(Failure("compile", target_, "broken"))

    monkeypatch.setattr(oracles, "_build_fails", lambda programs_, live, t: 11 in live)
    monkeypatch.setattr(oracles, "_target", target)
    failures = oracles.check_batch(programs, ["cpu"])
    assert [k for k, f in enumerate(failures) if f] == [11]
    assert sorted(sum(checked, [])) == list(range(16)) and len(checked) <= 5


def test_cache_and_threads_oracles_report_differences(monkeypatch: pytest.MonkeyPatch) -> None:
    program = next(p for p in (generate(5, i) for i in range(50))
                   if p.entry.result_types[0].dtype == "float32" and len(p.entry.body) <= 2)
    assert check(program, ["cpu"]) == []
    monkeypatch.setattr(oracles, "_one_thread", lambda library, programs: [
        tuple(np.asarray(r) + 1 for r in oracles._call(library, p)) for p in programs])
    real_build = oracles.build
    monkeypatch.setattr(oracles, "build", lambda *a, **k: dataclasses.replace(
        real_build(*a, **k), hit=False))
    kinds = {f.kind for f in check(program, ["cpu"])}
    assert kinds == {"threads/cpu", "cache/cpu"}


def test_the_reducer_drops_what_the_failure_does_not_need() -> None:
    program = next(p for p in (generate(11, i) for i in range(200))
                   if any("softmax" in s.template for s in p.entry.body)
                   and len(p.entry.body) >= 4)
    failure = Failure("reference", "cpu", "result 0: softmax is wrong")

    def fails(p: Program) -> list[Failure]:
        return [failure] if "softmax" in p.text() else []

    small = reduce(program, failure, ["cpu"], fails=fails, max_runs=500)
    assert "softmax" in small.text()
    assert len(small.entry.body) < len(program.entry.body)
    assert all(v <= 2 for v in small.sizes.values())


def test_a_failure_is_written_reduced(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_check(p: Program, targets: list[str], extra: bool = True) -> list[Failure]:
        return [Failure("crash", "cpu", "boom 3")] if len(p.entry.body) >= 1 else []

    monkeypatch.setattr("tilec.fuzz.run.check_batch",
                        lambda ps, t, fresh=True: [fake_check(p, t) for p in ps])
    monkeypatch.setattr("tilec.fuzz.reduce.check", fake_check)
    summary = fuzz(4, 1, ["cpu"], out=tmp_path)
    assert summary.failed["crash/cpu"] == 4 and not summary.ok
    written = sorted(tmp_path.glob("*.tile"))
    assert written and all(f.read_text().startswith("// tilec fuzz --seed 1") for f in written)
    assert all(f.read_text().count("let ") == 1 for f in written)   # reduced to one statement


def test_unknown_target_is_a_diagnostic(capsys: pytest.CaptureFixture) -> None:
    assert main(["fuzz", "--count", "1", "--target", "cpu,gpu"]) == 1
    assert "unknown target 'gpu'" in capsys.readouterr().err


@pytest.fixture(scope="module")
def replayed() -> dict[Path, list[Failure]]:
    """Every regression file's failures, all built together (one library per target)."""
    return dict(zip(REGRESSIONS, replay([p.read_text() for p in REGRESSIONS], REPLAY_TARGETS)))


@pytest.mark.parametrize("path", [_regression(p) for p in REGRESSIONS])
def test_reduced_failure_agrees(path: Path, replayed: dict[Path, list[Failure]]) -> None:
    """Each program the fuzzer found and reduced, on cpu, cpu -O0 and ascend-sim."""
    failures = replayed[path]
    assert failures == [], "\n".join(f"{f.kind}: {f.message}" for f in failures)


def test_a_written_program_replays_with_its_arguments() -> None:
    for i in range(40):
        p = generate(9, i)
        text = f"// tilec fuzz --seed 9: program {i}, oracle reference, target cpu\n{p.text()}"
        want, got = oracles.arguments(p), oracles.arguments(parse(text))
        assert want.keys() == got.keys()
        for k in want:
            assert np.array_equal(want[k], got[k]) and np.asarray(got[k]).dtype == \
                np.asarray(want[k]).dtype


@pytest.mark.fuzz
def test_fuzz_smoke_cpu(request: pytest.FixtureRequest) -> None:
    count = 1000 if request.config.getoption("--fuzz-long") else 100
    summary = fuzz(count, SMOKE_SEED, ["cpu"])
    assert summary.ok, "\n".join(summary.lines() + [f.program for f in summary.unique.values()])


@pytest.mark.fuzz
def test_fuzz_smoke_ascend_sim(request: pytest.FixtureRequest) -> None:
    count = 200 if request.config.getoption("--fuzz-long") else 20
    summary = fuzz(count, SMOKE_SEED, ["ascend-sim"])
    assert summary.ok, "\n".join(summary.lines() + [f.program for f in summary.unique.values()])


def _children(pid: int) -> list[int]:
    tasks = Path(f"/proc/{pid}/task")
    found = []
    for task in tasks.iterdir() if tasks.exists() else []:
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def test_ctrl_c_stops_a_parallel_run_cleanly(tmp_path: Path) -> None:
    """Ctrl-C reaches the whole process group: the run stops at once with status 130 and
    its summary, and the pool's workers neither print tracebacks nor outlive it."""
    run = subprocess.Popen(
        [sys.executable, "-c", "import sys; from tilec.cli import main; sys.exit(main())", "fuzz",
         "--count", "1000", "--seed", "3", "--jobs", "2", "--target", "cpu"], cwd=tmp_path,
        start_new_session=True, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while len(_children(run.pid)) < 3 and time.monotonic() < deadline:   # 2 workers, a tracker
        time.sleep(0.2)
    time.sleep(3)                       # the workers are importing tilec or running programs
    workers = _children(run.pid)
    for worker in workers:              # what reaches them first must not kill them
        os.kill(worker, signal.SIGINT)
    time.sleep(1)
    assert run.poll() is None
    os.killpg(run.pid, signal.SIGINT)
    try:
        out, _ = run.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        pytest.fail("tilec fuzz --jobs 2 did not stop within 30 s of Ctrl-C")
    assert run.returncode == 130, out
    assert "(interrupted)" in out and "Traceback" not in out, out
    time.sleep(1)
    assert not [w for w in workers if Path(f"/proc/{w}").exists()
                and "zombie" not in Path(f"/proc/{w}/status").read_text()], out


def test_an_empty_interrupted_run_claims_no_coverage() -> None:
    summary = Summary(interrupted=True)
    assert not any("every construct" in line for line in summary.lines())

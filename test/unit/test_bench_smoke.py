"""``tilec bench --quick --no-torch`` (tilec/bench/cpu_ops.py): the report comes out whole, on
stdout and in ``-o``; no timing is asserted (the figures of a smoke run mean nothing)."""
import os
import re
import subprocess
import sys

import pytest

OPS = ("swiglu", "rmsnorm", "layernorm", "softmax", "rope", "gelu", "transpose")
HEADER = re.compile(r"\| op \| dtype \| outputs \| MB moved \| copy GB/s, 1 / \d+ threads \| "
                    r"tilec ms \| tilec GB/s \| % of copy \| tilec --arch x86-64-v3 ms \(% of copy\) \| "
                    r"NumPy \|")
MS_AND_RATIO = r"\d[\d.e+-]* \(\d+\.\d\d×\)"      # a peer's cell: "0.0412 (1.23×)"
NUMBER = r"\d[\d.e+-]*"


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """(stdout, the -o file) of one ``tilec bench`` quick run without torch, with
    OPENBLAS_CORETYPE set (tilec bench must drop it) and a private compile cache."""
    tmp = tmp_path_factory.mktemp("bench")
    env = {**os.environ, "OPENBLAS_CORETYPE": "Haswell", "TILEC_CACHE_DIR": str(tmp / "cache")}
    done = subprocess.run([sys.executable, "-c", "import sys; from tilec.cli import main; "
                           "sys.exit(main())", "bench", "--quick", "--no-torch",
                           "-o", str(tmp / "cpu.md")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout, (tmp / "cpu.md").read_text()


def test_quick_bench_prints_and_writes_one_report(quick_report):
    out, written = quick_report
    assert out == written
    assert out.startswith("# tilec CPU benchmark, ")


def test_every_op_dtype_and_mode_has_a_row(quick_report):
    lines = quick_report[0].splitlines()
    assert any(HEADER.fullmatch(ln) for ln in lines)
    rows = [ln for ln in lines if re.match(r"\| \w+ \| float(32|16) \| (fresh|out=) \| ", ln)]
    assert [tuple(r.split(" | ")[:3]) for r in rows] == [
        (f"| {op}", dtype, mode) for op in OPS for dtype in ("float32", "float16")
        for mode in ("fresh", "out=")]
    for row in rows:
        cells = row.strip("| ").split(" | ")
        assert len(cells) == 10, row
        assert re.fullmatch(NUMBER, cells[3]), row                      # MB moved
        assert re.fullmatch(rf"{NUMBER} / {NUMBER}", cells[4]), row     # copy GB/s
        assert all(re.fullmatch(NUMBER, c) for c in cells[5:7]), row
        assert re.fullmatch(rf"{NUMBER}%", cells[7]), row
        baseline = rf"{NUMBER} \({NUMBER}%\)" if cells[2] == "out=" else ""  # out= only
        assert re.fullmatch(baseline, cells[8]), row
        numpy_has_no_erf = cells[0] == "gelu" and cells[9] == "—"
        assert re.fullmatch(MS_AND_RATIO, cells[9]) or numpy_has_no_erf, row


def test_targets_and_environment_are_reported(quick_report):
    out = quick_report[0]
    assert "## Targets" in out
    assert re.search(r"Targets met: \d+ of \d+\.", out)
    assert "OPENBLAS_CORETYPE=unset" in out          # tilec bench ran NumPy without it
    assert "tokens 64 x hidden 256" in out
    assert "torch" not in out.lower()


def test_quick_gemm_bench_prints_its_table(tmp_path):
    """``tilec bench --ops gemm --quick --no-torch``: every case has a row with GFLOP/s and a
    share of the peak, and the fused layer's line names the epilogue's cost."""
    env = {**os.environ, "TILEC_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", "import sys; from tilec.cli import main; "
                           "sys.exit(main())", "bench", "--ops", "gemm", "--quick", "--no-torch",
                           "-o", str(tmp_path / "gemm.md")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out == (tmp_path / "gemm.md").read_text()
    assert re.search(r"CPU code: x86-64-v[34]; .* peak \d+ GFLOP/s \(measured: \d+ threads of "
                     r"(16|8)-lane float32 FMAs", out)
    rows = [ln for ln in out.splitlines() if re.match(r"\| \d+ \| \d+ \| \d+ \| \w+ \| ", ln)]
    assert [r.split(" | ")[3] for r in rows] == ["float32", "bfloat16", "float16"]
    for row in rows:
        cells = row.strip("| ").split(" | ")
        assert re.fullmatch(NUMBER, cells[5]) and re.fullmatch(rf"{NUMBER}%", cells[6]), row
    assert re.search(r"the epilogue adds -?\d+\.\d%", out)


def test_quick_attention_bench_names_the_code_that_ran(tmp_path):
    """``tilec bench --ops attention --quick`` at TILEC_CPU=x86-64-v3: the header names the
    AVX2 code, and the prefill and decode rows have their times, and the decode its GB/s
    against the copy's and its share of it."""
    env = {**os.environ, "TILEC_CACHE_DIR": str(tmp_path / "cache"), "TILEC_CPU": "x86-64-v3"}
    done = subprocess.run([sys.executable, "-c", "import sys; from tilec.cli import main; "
                           "sys.exit(main())", "bench", "--ops", "attention", "--quick",
                           "-o", str(tmp_path / "attention.md")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    out = (tmp_path / "attention.md").read_text()
    assert out in done.stdout and "\nCPU code: x86-64-v3.\n" in out
    rows = [ln.strip("| ").split(" | ") for ln in out.splitlines()
            if re.match(r"\| (prefill|decode) \| ", ln)]
    assert [r[:5] for r in rows] == [["prefill", "64", "64", "yes", "float32"],
                                     ["decode", "1", "256", "no", "bfloat16"]]
    assert all(re.fullmatch(NUMBER, r[5]) for r in rows)
    assert re.fullmatch(rf"{NUMBER} \({NUMBER}\)", rows[1][8]) and rows[1][9].endswith("%")


def test_the_fma_peak_is_measured():
    """The bench's peak is an FMA loop timed on this machine (one thread of 8-lane FMAs here):
    a rate in GFLOP/s, not a formula of the clock (which Zen 4's 512-bit FMAs on 256-bit
    units, or a turbo clock, would break)."""
    from tilec.bench.peak import fma_peak
    rate = fma_peak(8, 1)
    assert rate is not None and 1 < rate < 10_000


def test_gemm_bench_runs_the_shapes_and_dtypes_it_is_given(tmp_path):
    """``--shapes`` and ``--dtypes`` replace the run's cases, ``--no-fused`` drops the fused
    layer's line; a malformed shape is a usage error naming it, not a traceback."""
    env = {**os.environ, "TILEC_CACHE_DIR": str(tmp_path / "cache")}
    command = [sys.executable, "-c", "import sys; from tilec.bench.gemm import main; "
               "sys.exit(main())", "--no-torch", "--no-fused", "--repeat", "1"]
    done = subprocess.run(command + ["--shapes", "8x16x24,3x5x7,1x64x32", "--dtypes", "float16"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [ln.split(" | ") for ln in done.stdout.splitlines()
            if re.match(r"\| \d+ \| \d+ \| \d+ \| \w+ \| ", ln)]
    assert [r[:4] for r in rows] == [["| 8", "16", "24", "float16"], ["| 3", "5", "7", "float16"],
                                     ["| 1", "64", "32", "float16"]]
    # a decode's row: its weight's bandwidth, its share of a copy of as many bytes measured
    # with it and the copy's, over a rotation of at most MOST_WEIGHTS weights
    assert rows[0][7] == "" and re.fullmatch(r"\d+\.\d \(\d+%; copy \d+\.\d, (\d+) weights\)",
                                             rows[2][7]), rows[2]
    # and for the weight stored [N, K], as a Linear's (no torch here: its cell says so)
    assert rows[0][11] == " |" and re.fullmatch(r"\d+\.\d \(\d+%\), — \|", rows[2][11]), rows[2]
    assert 2 <= int(re.search(r"(\d+) weights", rows[2][7]).group(1)) <= 64
    assert "gelu" not in done.stdout
    bad = subprocess.run(command + ["--shapes", "8x16"], capture_output=True, text=True,
                         env=env, timeout=300)
    assert bad.returncode == 2 and "shape '8x16' is not MxNxK" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_the_warm_up_outlasts_a_peers_spinning_threads():
    """A peer's idle threads spin for milliseconds after its last call (GNU OpenMP's under
    torch, OpenBLAS's) and take a core from whatever runs next: on 2 cores tilec's 2048^3
    matmul timed right after torch's took 84 ms, after itself 78.  ``best`` warms up for
    50 ms of calls, at least one, before it times any."""
    import time

    from tilec.bench.gemm import best
    calls = []

    def run() -> None:
        calls.append(time.perf_counter())
        time.sleep(0.01)

    best(run, 2)
    assert len(calls) >= 5 + 2
    assert calls[-2] - calls[0] >= 0.05


def test_runs_compared_by_a_ratio_are_timed_in_turns():
    """A decode's bandwidth is a share of a copy's: timed one after the other in whole, on a
    host whose speed drifts, the copy read 33 GB/s and a minute later 60.  ``in_turns``
    times each run once a round, each after its own warm-up, and keeps every round's time
    (``round_share`` compares them round by round); ``best_each`` keeps each one's best."""
    import time

    from tilec.bench.gemm import best_each, in_turns
    calls = []

    def runner(name: str, seconds: float):
        def run() -> None:
            calls.append(name)
            time.sleep(seconds)
        return run

    a, b = in_turns([runner("a", 0.01), runner("b", 0.03)], 3)
    turns = [name for i, name in enumerate(calls) if i == 0 or calls[i - 1] != name]
    assert turns == ["a", "b"] * 3
    assert len(a) == len(b) == 3 and max(a) < 0.03 <= min(b)
    fast, slow = best_each([runner("a", 0.01), runner("b", 0.03)], 2)
    assert 0.01 <= fast < 0.03 <= slow


def test_a_share_of_a_copy_is_taken_round_by_round():
    """The host's bandwidth doubled for one round, which the copy saw and the decode did not:
    a ratio of the bests reads 50%; in the other rounds the decode moved its bytes as fast
    as the copy, so its share (the median of the rounds' shares) is 1.  Two slow rounds of
    three are its share."""
    from tilec.bench.gemm import round_share
    decode, copy = [1.0, 1.0, 1.0], [0.5, 1.0, 1.0]    # seconds a round over as many bytes
    assert (1 / min(decode)) / (1 / min(copy)) == 0.5   # the ratio of the bests
    assert round_share(decode, copy, 1, 1) == 1.0
    assert round_share(decode, copy, 1, 2) == 0.5       # the copy moved twice the bytes
    assert round_share([1.0, 2.0, 2.0], [0.5, 1.0, 1.0], 1, 1) == 0.5

"""tilec's matmul (the CPU GEMM of ``runtime/cpu_gemm.c``) against ``torch.matmul``, NumPy and,
for the fused ``gelu(x @ transpose(w) + b)``, PyTorch eager and ``torch.compile``.

In: the shapes of issue 17 (square 512 to 4096; LLM layers M in {1, 16, 128, 2048} by (K, N)
in {(4096, 4096), (4096, 11008), (11008, 4096), (4096, 14336)}) in float32, bfloat16 and
float16.  Out: one markdown table: per case the best time of each implementation (outputs
preallocated for every one, ``out=``), tilec's GFLOP/s and fraction of the machine's peak
FMA rate, each peer's time and tilec's speed-up over it.  M = 1 (decode) calls rotate
through weights whose working set is at least twice the last level cache when the machine
holds them (else as many as fit a quarter of its memory), and the row reports the weight's
bytes per second against a copy's over as many bytes, timed in turns with it (``in_turns``;
``np.copyto`` between preallocated buffers in as many threads as tilec runs, bytes read
and written), for the weight stored [K, N] (``x @ w``) and, in its last column, stored [N, K]
as a Linear layer's is (``x @ transpose(w)``, the same bytes reshaped).  Its percentage of
the copy is that of each round, the median over the rounds (``round_share``): the host's
bandwidth moves between rounds, and the two bests may come from different ones.

Peak: measured (``tilec/bench/peak.py``): on each of this process's CPUs a loop of
independent float32 FMAs on vectors of the code tilec runs (16 lanes for AVX-512, 8 for
AVX2), the best of three; nominal formulas miscount (AMD's Zen 4 runs a 512-bit FMA on two
256-bit units; turbo passes the nominal clock).

    tilec bench --ops gemm [--full] [--quick] [--no-torch] [--dtypes D,..] [--shapes MxNxK,..]
                           [--no-fused] [--repeat N] [-o FILE]

The default run is short (square 1024 and 2048, M in {1, 16, 128, 2048} at K = N = 4096, the
fused layer at M = 2048, float32 and bfloat16); ``--full`` runs every shape and dtype of the
issue; ``--quick`` is a smoke test of seconds.  ``TILEC_CPU=x86-64-v3`` times the AVX2 code.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional, Sequence

import ml_dtypes
import numpy as np

import tilec
from tilec.bench.peak import fma_peak

SOURCE = """
func mm_f32(x: Tensor<f32>[m, k], w: Tensor<f32>[k, n]) -> Tensor<f32>[m, n] { return x @ w; }
func mm_bf16(x: Tensor<bf16>[m, k], w: Tensor<bf16>[k, n]) -> Tensor<bf16>[m, n] { return x @ w; }
func mm_f16(x: Tensor<f16>[m, k], w: Tensor<f16>[k, n]) -> Tensor<f16>[m, n] { return x @ w; }
func linear(x: Tensor<f32>[m, k], w: Tensor<f32>[n, k]) -> Tensor<f32>[m, n] {
  return x @ transpose(w, perm=[1, 0]);
}
func linear_bf16(x: Tensor<bf16>[m, k], w: Tensor<bf16>[n, k]) -> Tensor<bf16>[m, n] {
  return x @ transpose(w, perm=[1, 0]);
}
func linear_f16(x: Tensor<f16>[m, k], w: Tensor<f16>[n, k]) -> Tensor<f16>[m, n] {
  return x @ transpose(w, perm=[1, 0]);
}
func linear_gelu(x: Tensor<f32>[m, k], w: Tensor<f32>[n, k], b: Tensor<f32>[n])
    -> Tensor<f32>[m, n] {
  return gelu(x @ transpose(w, perm=[1, 0]) + b);
}
"""
DTYPES = {"float32": (np.float32, "f32"), "bfloat16": (ml_dtypes.bfloat16, "bf16"),
          "float16": (np.float16, "f16")}
SQUARE = (512, 1024, 2048, 4096)
LLM_M = (1, 16, 128, 2048)
LLM_KN = ((4096, 4096), (4096, 11008), (11008, 4096), (4096, 14336))
Case = tuple[int, int, int, str]     # m, n, k, dtype


def cases(full: bool, quick: bool, dtypes: Optional[Sequence[str]] = None,
          shapes: Optional[Sequence[tuple[int, int, int]]] = None) -> list[Case]:
    """The run's cases; ``dtypes`` and ``shapes`` (M, N, K), where given, replace the run's
    own."""
    if quick:
        return [(64, 64, 64, "float32"), (1, 96, 80, "bfloat16"), (20, 48, 40, "float16")]
    if full:
        own = [(s, s, s) for s in SQUARE] + [(m, n, k) for m in LLM_M for k, n in LLM_KN]
        kinds: Sequence[str] = list(DTYPES)
    else:
        own = [(1024, 1024, 1024), (2048, 2048, 2048)] + [(m, 4096, 4096) for m in LLM_M]
        kinds = ("float32", "bfloat16")
    return [(m, n, k, d) for d in dtypes or kinds for m, n, k in shapes or own]


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """``MxNxK,MxNxK,...``; argparse's error naming the text otherwise."""
    shapes = []
    for part in text.split(","):
        dims = part.lower().split("x")
        if len(dims) != 3 or not all(d.isdigit() and int(d) >= 1 for d in dims):
            raise argparse.ArgumentTypeError(f"shape '{part}' is not MxNxK (positive integers)")
        shapes.append((int(dims[0]), int(dims[1]), int(dims[2])))
    return shapes


def parse_dtypes(text: str) -> list[str]:
    kinds = text.split(",")
    for kind in kinds:
        if kind not in DTYPES:
            raise argparse.ArgumentTypeError(f"dtype '{kind}' is not one of {', '.join(DTYPES)}")
    return kinds


WARM_UP_S = 0.05   # a peer's idle threads spin for milliseconds after its last call


def best(run: Callable[[], Any], repeat: int,
         clock: Callable[[], float] = time.perf_counter) -> float:
    """The least of ``repeat`` calls of ``run`` after WARM_UP_S of untimed calls (at least
    one), on ``clock`` (wall clock; one thread's CPU time with ``time.thread_time``).  The
    warm-up outlasts the spinning of the last peer's threads (GNU OpenMP's under torch,
    OpenBLAS's), which would otherwise take a core from the first timed calls."""
    start = time.perf_counter()
    run()
    while time.perf_counter() - start < WARM_UP_S:
        run()
    times = []
    for _ in range(repeat):
        t = clock()
        run()
        times.append(clock() - t)
    return min(times)


def in_turns(runs: Sequence[Callable[[], Any]], repeat: int) -> list[list[float]]:
    """Each of ``runs`` timed once a round for ``repeat`` rounds, each time after WARM_UP_S of
    its own untimed calls: per run, its seconds round by round.  On a host whose speed
    drifts over minutes (a copy measured 33 GB/s, then 60 a minute later), two runs timed
    one after the other in whole do not compare; in turns they see the same host."""
    times: list[list[float]] = [[] for _ in runs]
    for _ in range(repeat):
        for i, run in enumerate(runs):
            times[i].append(best(run, 1))
    return times


def best_each(runs: Sequence[Callable[[], Any]], repeat: int) -> list[float]:
    """The least of each run's times ``in_turns``."""
    return [min(t) for t in in_turns(runs, repeat)]


def round_share(mine: Sequence[float], theirs: Sequence[float], my_bytes: int,
                their_bytes: int) -> float:
    """The median over rounds (``in_turns``) of one run's bytes a second over another's in the
    same round.  Each run's best time may come from a different round, and the host's
    bandwidth moved by a factor of 1.3-2 between rounds seconds apart (a copy's best of
    15 read 60 GB/s beside 36-42 in most rounds): a ratio of bests compares two hosts, a
    round's ratio one."""
    return statistics.median((my_bytes / a) / (their_bytes / b) for a, b in zip(mine, theirs))


def peak_gflops(lanes: int, threads: Optional[int] = None) -> tuple[float, str]:
    """The FMA peak of ``threads`` cores (default: this process's CPUs), measured
    (:mod:`tilec.bench.peak`), and how it was found; where the loop cannot be built, the
    nominal cores x 2 FMA units x lanes x 2 flops x clock (``cpu MHz`` of /proc/cpuinfo)."""
    cores = threads or len(os.sched_getaffinity(0))
    measured = fma_peak(lanes, cores)
    if measured is not None:
        return measured, (f"measured: {cores} threads of {lanes}-lane float32 FMAs in 12 "
                          "independent chains, best of 3")
    mhz = 0.0
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("cpu MHz"):
            mhz = float(line.split(":")[1])
            break
    peak = cores * 2 * lanes * 2 * mhz / 1000
    return peak, f"nominal: {cores} cores x 2 FMA units x {lanes} lanes x 2 flops x {mhz:.0f} MHz"


def last_level_cache() -> int:
    """Bytes of the largest cache of CPU 0 (sysfs), 32 MiB when sysfs does not say."""
    sizes = []
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = entry.read_text().strip()
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        if text[:-1].isdigit() and text[-1] in units:
            sizes.append(int(text[:-1]) * units[text[-1]])
    return max(sizes, default=32 << 20)


MOST_WEIGHTS = 64    # a small weight's rotation stays short (its set fits a cache anyway)


def weights(k: int, n: int, dtype: Any, rotate: bool, rng: np.random.Generator) -> list:
    """The weights a case reads: one, or (``rotate``) as many copies as make a working set of
    twice the last level cache, at most a quarter of the memory and MOST_WEIGHTS."""
    one = (rng.standard_normal((k, n), dtype=np.float32) * 0.05).astype(dtype)
    if not rotate:
        return [one]
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    want = max(2, -(-2 * last_level_cache() // one.nbytes))
    count = max(2, min(want, memory // 4 // one.nbytes, MOST_WEIGHTS))
    return [one] + [one.copy() for _ in range(count - 1)]


class Peers:
    """The peers that are installed (torch and torch.compile optional)."""

    def __init__(self, use_torch: bool) -> None:
        self.torch: Any = None
        if use_torch:
            try:
                import torch
                torch.set_num_threads(len(os.sched_getaffinity(0)))
                self.torch = torch
            except ImportError:
                pass
        self.compiled: Optional[Callable] = None

    def tensor(self, a: np.ndarray) -> Any:
        torch = self.torch
        if a.dtype == ml_dtypes.bfloat16:
            return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(a)

    def fused(self) -> Callable:
        if self.compiled is None:
            f = self.torch.nn.functional
            self.compiled = self.torch.compile(lambda x, w, b: f.gelu(f.linear(x, w, b)))
        return self.compiled


def time_case(lib: Any, peers: Peers, case: Case, repeat: int, rng: np.random.Generator,
              rotate: bool) -> dict[str, float]:
    """Best seconds per implementation of one matmul case (outputs preallocated).  A decode
    (M = 1, rotating weights) times whole rotations, each call on the next weight, and then
    a copy of as many bytes, the three in turns (``in_turns``), and the weight's share of the
    copy's bandwidth in a round, the median over the rounds (``round_share``)."""
    m, n, k, dtype = case
    kind, suffix = DTYPES[dtype]
    x = (rng.standard_normal((m, k), dtype=np.float32)).astype(kind)
    ws = weights(k, n, kind, rotate and m == 1, rng)
    out = np.empty((m, n), kind)
    fn = getattr(lib, f"mm_{suffix}")

    def timed(call: Callable[[Any], Any], operands: list) -> float:
        if m == 1:
            return best(lambda: [call(w) for w in operands], repeat) / len(operands)
        return best(lambda: call(operands[0]), repeat)

    if m == 1:    # also a Linear's weight, stored [n, k] (each weight's bytes reshaped)
        linear = getattr(lib, "linear" if dtype == "float32" else f"linear_{suffix}")
        wbytes = sum(w.nbytes for w in ws)
        with copying(wbytes, tilec_threads()) as (copy, moved):
            kn, nk, copied = in_turns([lambda: [fn(x, w, out=out) for w in ws],
                                       lambda: [linear(x, w.reshape(n, k), out=out)
                                                for w in ws], copy], repeat)
        got = {"tilec": min(kn) / len(ws), "tilec [n, k]": min(nk) / len(ws),
               "copy": moved / min(copied) / 1e9,
               "share": round_share(kn, copied, wbytes, moved),
               "share [n, k]": round_share(nk, copied, wbytes, moved)}
    else:
        got = {"tilec": timed(lambda w: fn(x, w, out=out), ws)}
    if dtype == "float32":
        got["numpy"] = timed(lambda w: np.matmul(x, w, out=out), ws)
    torch = peers.torch
    if torch is not None:
        tx, tws, to = peers.tensor(x), [peers.tensor(w) for w in ws], peers.tensor(out)
        got["torch"] = timed(lambda w: torch.matmul(tx, w, out=to), tws)
        if m == 1:
            got["torch [n, k]"] = timed(lambda w: torch.matmul(tx, w.reshape(n, k).t(), out=to),
                                        tws)
        if dtype != "float32":
            fx, fws = tx.float(), [w.float() for w in tws]
            fo = torch.empty((m, n), dtype=torch.float32)
            got["torch f32"] = timed(lambda w: torch.matmul(fx, w, out=fo), fws)
    got["weights"] = len(ws)
    return got


def time_fused(lib: Any, peers: Peers, m: int, n: int, k: int, repeat: int,
               rng: np.random.Generator,
               clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((n, k), dtype=np.float32) * 0.05
    b = rng.standard_normal(n, dtype=np.float32)
    out = np.empty((m, n), np.float32)
    got = {"tilec": best(lambda: lib.linear_gelu(x, w, b, out=out), repeat, clock),
           "tilec bare": best(lambda: lib.linear(x, w, out=out), repeat, clock)}
    if peers.torch is not None:
        torch, f = peers.torch, peers.torch.nn.functional
        tx, tw, tb, to = (peers.tensor(a) for a in (x, w, b, out))
        got["torch"] = best(lambda: to.copy_(f.gelu(f.linear(tx, tw, tb))), repeat, clock)
        fused = peers.fused()
        with torch.no_grad():
            got["compile"] = best(lambda: to.copy_(fused(tx, tw, tb)), repeat, clock)
    return got


def tilec_threads() -> int:
    """The threads tilec's pool runs (as the runtime counts them)."""
    wanted = os.environ.get("TILEC_NUM_THREADS", "")
    if wanted.isdigit() and int(wanted) >= 1:
        return min(int(wanted), 1024)
    return len(os.sched_getaffinity(0))


@contextmanager
def copying(nbytes: int, threads: int) -> Iterator[tuple[Callable[[], None], int]]:
    """A copy of ``nbytes`` between two preallocated buffers in ``threads`` threads (NumPy
    releases the GIL while it copies), and the bytes it moves as STREAM counts them: read
    and written."""
    a = np.ones(nbytes // 4, np.float32)
    b = np.empty_like(a)
    cuts = np.linspace(0, a.size, threads + 1).astype(int)
    with ThreadPoolExecutor(threads) as pool:
        def copy() -> None:
            list(pool.map(lambda i: np.copyto(b[cuts[i]:cuts[i + 1]], a[cuts[i]:cuts[i + 1]]),
                          range(threads)))
        yield copy, 2 * a.nbytes


def ratio(peer: Optional[float], mine: float) -> str:
    return "—" if peer is None else f"{peer * 1e3:.3g} ({peer / mine:.2f}×)"


def amx_line(level: str) -> str:
    """What tilec's bfloat16 x bfloat16 and float16 x float16 products (beyond 16 rows) run
    on: AMX, AVX512-BF16's dot products, or float32 FMA, from the CPU flags of
    /proc/cpuinfo and TILEC_CPU, as the runtime decides (tilec_cpu_amx, tilec_cpu_bf16)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        flags = ""
    wanted = os.environ.get("TILEC_CPU")
    if level == "x86-64-v4" and "amx_bf16" in flags and "amx_tile" in flags and wanted is None:
        return ("bfloat16 x bfloat16 runs on AMX tiles, and float16 x float16 too, each element "
                "split into two bfloat16 (their % of peak is of the FMA peak, so it may pass "
                "100%)")
    if level == "x86-64-v4" and "avx512_bf16" in flags and wanted in (None, "x86-64-v4+bf16"):
        return ("bfloat16 x bfloat16 runs AVX512-BF16's vdpbf16ps, two products a lane (its % "
                "of peak is of the FMA peak, so it may pass 100%); float16 widened to float32")
    return "bfloat16 and float16 widened to float32 (no AMX)"


def report(rows: list[tuple[Case, dict]], fused: Optional[tuple], level: str,
           peak: tuple) -> str:
    lines = [f"# tilec GEMM benchmark, {time.strftime('%Y-%m-%d %H:%M')}", "",
             f"CPU code: {level}; {platform.processor() or platform.machine()}, "
             f"{len(os.sched_getaffinity(0))} CPUs; peak {peak[0]:.0f} GFLOP/s ({peak[1]}); "
             f"{amx_line(level)}; load average "
             f"{os.getloadavg()[0]:.1f} at the end.  Best of the timed calls, outputs "
             "preallocated; a peer's cell: ms (tilec's speed-up over it).  M = 1: the "
             "weight's best GB/s, and in brackets its share of the copy's GB/s in the same "
             "round, the median over the rounds (`round_share`), and the copy's best.", "",
             "| M | N | K | dtype | tilec ms | GFLOP/s | % of peak | weight GB/s (% of copy; "
             "copy GB/s) | torch.matmul | torch.matmul f32 | NumPy | weight stored [N, K]: GB/s "
             "(% of copy), torch.matmul |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (m, n, k, dtype), t in rows:
        mine = t["tilec"]
        gflops = 2 * m * n * k / mine / 1e9
        wbytes = k * n * np.dtype(DTYPES[dtype][0]).itemsize
        stream = linear = ""
        if m == 1:
            gbps, gbps_t = wbytes / mine / 1e9, wbytes / t["tilec [n, k]"] / 1e9
            stream = f"{gbps:.1f} ({100 * t['share']:.0f}%; copy {t['copy']:.1f}, " \
                     f"{t['weights']} weights)"
            linear = f"{gbps_t:.1f} ({100 * t['share [n, k]']:.0f}%), " \
                     f"{ratio(t.get('torch [n, k]'), t['tilec [n, k]'])}"
        lines.append(f"| {m} | {n} | {k} | {dtype} | {mine * 1e3:.3g} | {gflops:.1f} | "
                     f"{100 * gflops / peak[0]:.0f}% | {stream} | {ratio(t.get('torch'), mine)} "
                     f"| {ratio(t.get('torch f32'), mine)} | {ratio(t.get('numpy'), mine)} "
                     f"| {linear} |")
    if fused is not None:
        (m, n, k), t = fused
        mine = t["tilec"]
        lines += ["", f"`gelu(x @ transpose(w) + b)`, M = {m}, N = {n}, K = {k}, float32: "
                  f"tilec {mine * 1e3:.3g} ms ({2 * m * n * k / mine / 1e9:.1f} GFLOP/s), "
                  f"the bare `x @ transpose(w)` {t['tilec bare'] * 1e3:.3g} ms (the epilogue "
                  f"adds {100 * (mine / t['tilec bare'] - 1):.1f}%); PyTorch eager "
                  f"{ratio(t.get('torch'), mine)}, torch.compile {ratio(t.get('compile'), mine)}."]
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="tilec bench --ops gemm", description=__doc__.split("\n\n")[0])
    p.add_argument("--full", action="store_true", help="every shape and dtype of the issue")
    p.add_argument("--quick", action="store_true", help="tiny shapes: a smoke test")
    p.add_argument("--no-torch", action="store_true", help="leave out the PyTorch peers")
    p.add_argument("--repeat", type=int, default=3, help="timed calls per case (default 3)")
    p.add_argument("--dtypes", type=parse_dtypes, help="comma-separated: float32,bfloat16,"
                   "float16 (default: the run's own)")
    p.add_argument("--shapes", type=parse_shapes, help="MxNxK,... (default: the run's own)")
    p.add_argument("--no-fused", action="store_true", help="leave out the fused layer")
    p.add_argument("-o", dest="output", help="also write the report here")
    args = p.parse_args(argv)
    lib = tilec.compile_string(SOURCE, "gemm_bench.tile")
    level = lib.cpu_code or "unknown"
    peers = Peers(not args.no_torch)
    rng = np.random.default_rng(0)
    todo = cases(args.full, args.quick, args.dtypes, args.shapes)
    rows = []
    for i, case in enumerate(todo, 1):     # progress on stderr: a --full run takes minutes
        rows.append((case, time_case(lib, peers, case, args.repeat, rng, not args.quick)))
        m, n, k, dtype = case
        print(f"  [{i}/{len(todo)}] {m}x{n}x{k} {dtype}: tilec "
              f"{rows[-1][1]['tilec'] * 1e3:.3g} ms", file=sys.stderr, flush=True)
    shape = (32, 64, 48) if args.quick else (2048, 4096, 4096)
    fused = None if args.no_fused else (shape, time_fused(lib, peers, *shape, args.repeat, rng))
    lanes = 16 if level == "x86-64-v4" else 8
    text = report(rows, fused, level, peak_gflops(lanes))
    print(text, end="")
    if args.output:
        Path(args.output).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

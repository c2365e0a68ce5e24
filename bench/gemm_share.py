"""tilec's matmul against torch.matmul and NumPy in thread CPU time on one thread.

On a machine that others load, the wall-clock ratios of ``bench/gemm.py`` swing with the
load (every peer's threads wait for cores, each in its own way); one thread's CPU time
still counts its memory stalls but not its waits for a core.  Run:

    .venv/bin/python bench/gemm_share.py [--repeat 5] [--quick]

(``TILEC_CPU=x86-64-v3`` for tilec's AVX2 code; ``x86-64-v4`` for its AVX-512 code without
AMX).  Every implementation on one thread (``TILEC_NUM_THREADS``, ``torch.set_num_threads``
and ``OPENBLAS_NUM_THREADS`` set to 1 here), outputs preallocated, the best of ``--repeat``
calls after one; a peer's cell: CPU ms (tilec's speed-up over it).  Peak: one core's FMA
rate, measured as ``bench/gemm.py`` measures it for all cores.
"""
from __future__ import annotations

import os

os.environ["TILEC_NUM_THREADS"] = "1"
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import argparse  # noqa: E402
import time  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402

import tilec  # noqa: E402
from tilec.bench.gemm import (DTYPES, SOURCE, Peers, amx_line, best,  # noqa: E402
                              peak_gflops, time_fused)

SHAPES = ((2048, 2048, 2048), (2048, 4096, 4096), (16, 4096, 4096))
QUICK = ((64, 64, 64),)


def cpu_best(call: Callable[[], Any], repeat: int) -> float:
    return best(call, repeat, time.thread_time)


def matmul_row(lib: Any, peers: Peers, m: int, n: int, k: int, dtype: str,
               repeat: int) -> dict[str, float]:
    kind, suffix = DTYPES[dtype]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k), dtype=np.float32).astype(kind)
    w = (rng.standard_normal((k, n), dtype=np.float32) * 0.05).astype(kind)
    out = np.empty((m, n), kind)
    fn = getattr(lib, f"mm_{suffix}")
    got = {"tilec": cpu_best(lambda: fn(x, w, out=out), repeat)}
    if dtype == "float32":
        got["numpy"] = cpu_best(lambda: np.matmul(x, w, out=out), repeat)
    torch = peers.torch
    if torch is not None:
        tx, tw, to = peers.tensor(x), peers.tensor(w), peers.tensor(out)
        got["torch"] = cpu_best(lambda: torch.matmul(tx, tw, out=to), repeat)
        if dtype != "float32":
            fx, fw = tx.float(), tw.float()
            fo = torch.empty((m, n), dtype=torch.float32)
            got["torch f32"] = cpu_best(lambda: torch.matmul(fx, fw, out=fo), repeat)
    return got


def cell(got: dict[str, float], peer: str) -> str:
    t = got.get(peer)
    return "—" if t is None else f"{t * 1e3:.3g} ({t / got['tilec']:.2f}×)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="one tiny shape: a smoke test")
    parser.add_argument("--no-torch", action="store_true")
    args = parser.parse_args()
    lib = tilec.compile_string(SOURCE, "gemm_share.tile")
    level = lib.cpu_code or "unknown"
    peers = Peers(not args.no_torch)
    if peers.torch is not None:
        peers.torch.set_num_threads(1)
    peak = peak_gflops(16 if level == "x86-64-v4" else 8, threads=1)[0]
    print(f"CPU code: {level}, one thread; one core's peak {peak:.0f} GFLOP/s; "
          f"{amx_line(level)}; load average {os.getloadavg()[0]:.1f}.\n")
    print("| M | N | K | dtype | tilec CPU ms | GFLOP per CPU-s | % of peak | torch.matmul "
          "| torch.matmul f32 | NumPy |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    shapes = QUICK if args.quick else SHAPES
    for m, n, k in shapes:
        for dtype in DTYPES:
            got = matmul_row(lib, peers, m, n, k, dtype, args.repeat)
            rate = 2 * m * n * k / got["tilec"] / 1e9
            print(f"| {m} | {n} | {k} | {dtype} | {got['tilec'] * 1e3:.3g} | {rate:.1f} | "
                  f"{100 * rate / peak:.0f}% | {cell(got, 'torch')} | {cell(got, 'torch f32')} "
                  f"| {cell(got, 'numpy')} |", flush=True)
    m, n, k = shapes[0] if args.quick else (2048, 4096, 4096)
    got = time_fused(lib, peers, m, n, k, args.repeat, np.random.default_rng(1),
                     time.thread_time)
    print(f"\n`gelu(x @ transpose(w) + b)`, M = {m}, N = {n}, K = {k}, float32: tilec "
          f"{got['tilec'] * 1e3:.3g} CPU ms, the bare `x @ transpose(w)` "
          f"{got['tilec bare'] * 1e3:.3g} (the epilogue adds "
          f"{100 * (got['tilec'] / got['tilec bare'] - 1):.1f}%); PyTorch eager "
          f"{cell(got, 'torch')}, torch.compile {cell(got, 'compile')}.")
    print(f"\nLoad average at the end: {os.getloadavg()[0]:.1f}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

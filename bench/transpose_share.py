"""A transpose's share of a copy's bandwidth, in thread CPU time on one thread.

On a machine that others load, wall-clock medians (``tilec bench``) swing with the load;
the CPU time of one thread, while it still counts the memory stalls, does not count the
time it waits for a core.  Run:

    TILEC_NUM_THREADS=1 .venv/bin/python bench/transpose_share.py [--size 4096]

(``TILEC_CPU=x86-64-v3`` to run the x86-64-v3 code of a CPU that has AVX-512).  For each of
float32 and float16: ``np.copyto`` and tilec's transpose (``out=``) of ``size x size``
elements, each the 20th-percentile time of 15 calls after 2, best of 3 such passes.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Callable

import numpy as np

import tilec

SOURCE = Path(__file__).resolve().parents[1] / "tilec" / "bench" / "ops" / "transpose.tile"


def cpu_time(call: Callable[[], object], rounds: int = 15) -> float:
    for _ in range(2):
        call()
    times = []
    for _ in range(rounds):
        start = time.thread_time()
        call()
        times.append(time.thread_time() - start)
    return sorted(times)[rounds // 5]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    n = parser.parse_args().size
    lib = tilec.compile(str(SOURCE), target="cpu")
    for dtype, fn in ((np.float32, lib.transpose_f32), (np.float16, lib.transpose_f16)):
        x = np.random.default_rng(0).standard_normal((n, n)).astype(dtype)
        out, source, target = np.empty_like(x), np.ones_like(x), np.empty_like(x)
        copy = min(cpu_time(lambda: np.copyto(target, source)) for _ in range(3))
        transpose = min(cpu_time(lambda: fn(x, out=out)) for _ in range(3))
        assert np.array_equal(out, x.T)
        print(f"{np.dtype(dtype).name}: copy {copy * 1e3:.2f} ms, transpose "
              f"{transpose * 1e3:.2f} ms: {copy / transpose:.0%} of copy")


if __name__ == "__main__":
    main()

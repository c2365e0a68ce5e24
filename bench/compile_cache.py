"""Cold versus cached compile time of the shared examples, as a Markdown table.

Each figure is the median wall time of ``tilec OP.tile --target T -o OP.so`` run as a command
(what a build system pays, Python start-up included): cold with an empty cache directory,
cached with the entry that the cold run stored.  Targets whose backend is not built into this
tilec are left out.

    .venv/bin/python bench/compile_cache.py [--repeat N] [--targets cpu,ptx,ascend-sim]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = ("swiglu", "layernorm", "rmsnorm_templated", "rope")
TILEC = Path(sys.executable).parent / "tilec"


def timed_compile(op: str, target: str, cache: Path, output: Path) -> tuple[float, str]:
    """Seconds of one compile and its error output (empty when it succeeded)."""
    env = {**os.environ, "TILEC_CACHE_DIR": str(cache)}
    start = time.perf_counter()
    done = subprocess.run([TILEC, REPO / "ops" / f"{op}.tile", "--target", target, "-o", output],
                          env=env, capture_output=True, text=True)
    return time.perf_counter() - start, done.stderr if done.returncode else ""


def measure(op: str, target: str, repeat: int) -> tuple[float, float] | str:
    """Median cold and cached seconds, or the error that stopped the first compile."""
    cold, cached = [], []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="tilec-bench-") as tmp:
            output = Path(tmp) / "out" / f"{op}.so"
            seconds, error = timed_compile(op, target, Path(tmp) / "cache", output)
            if error:
                return error.strip().splitlines()[0]
            cold.append(seconds)
            cached.append(timed_compile(op, target, Path(tmp) / "cache", output)[0])
    return statistics.median(cold), statistics.median(cached)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (default 3)")
    parser.add_argument("--targets", default="cpu,ptx,ascend-sim",
                        help="comma-separated targets (default cpu,ptx,ascend-sim)")
    args = parser.parse_args()
    print("| op | target | cold s | cached s | speed-up |\n| --- | --- | --- | --- | --- |")
    for target in args.targets.split(","):
        for op in EXAMPLES:
            figures = measure(op, target, args.repeat)
            if isinstance(figures, str):
                print(f"{target}: left out ({figures})", file=sys.stderr)
                break
            cold, cached = figures
            print(f"| {op} | {target} | {cold:.3f} | {cached:.3f} | {cold / cached:.1f}× |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

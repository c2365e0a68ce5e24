"""Compile speed: tilec's in-process compile of swiglu, rmsnorm and softmax to a cubin for
sm_90, against Triton compiling equivalent kernels, those of ``triton_kernels.py`` that the GPU
check runs, offline (``triton.compile`` with ``GPUTarget("cuda", 90, 32)`` needs no GPU).

    .venv/bin/python bench/compile_speed.py [--repeat N] [--first N]

Prints two tables of median wall times, seconds per kernel:

- **first compile in a process**: a fresh Python process imports everything the compile needs
  (tilec's front end, passes and PTX backend, llvmlite; Triton and its NVIDIA backend) and
  times its first compile, ``--first`` processes per kernel and compiler;
- **steady state**: in this process, after every kernel was compiled once by both, each
  compile of ``--repeat`` gets a source never compiled before (a numbered comment appended:
  nothing keyed on the source can be reused).

What tilec reuses from one compile to the next in a process: the Lark parser (whose tables a
first compile reads from tilec's cache directory when an earlier process wrote them), the
tile dialect's IRDL text, which pass names are valid, the NVPTX target's initialisation and
one target machine per arch, the wheels' paths, the bytes of ``libdevice.10.bc`` and, per
libdevice function it calls (``__nv_expf``, ...), that function and what it uses extracted
from libdevice as bitcode.  Each compile makes a new MLIR context, parses, runs every pass,
lowers, optimises and runs ptxas.  Triton reuses its imports, LLVM's initialisation and its loaded backends;
its cache goes to a new empty directory for every compile.  Triton is not a dependency of
tilec: without it the Triton column says why and tilec is still measured.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Callable, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")   # Triton 3.9's default, said quietly
KERNELS = ("swiglu", "rmsnorm", "softmax")

SOURCES = {
    "swiglu": (REPO / "ops" / "swiglu.tile").read_text(),
    "rmsnorm": "func rmsnorm(x: Tensor<bf16>[seq, hidden], w: Tensor<bf16>[hidden], "
               "eps: float32 = 1e-6) -> Tensor<bf16>[seq, hidden] {\n"
               "  let xf = cast(x, float32);\n"
               "  let ms = reduce_mean(xf * xf, axes=[-1]);\n"
               "  return cast(xf * rsqrt(ms + eps) * cast(w, float32), bfloat16);\n}\n",
    "softmax": "func softmax_rows(x: Tensor[rows, n]) -> Tensor[rows, n] {\n"
               "  return softmax(x, axis=-1);\n}\n",
}

TRITON_KERNELS = REPO / "bench" / "triton_kernels.py"
"""The GPU check's Triton kernels (``_swiglu``, ``_rmsnorm``, ``_softmax``, ...), compiled here."""

TRITON_SIGNATURES = {
    "swiglu": {"inp": "*fp16", "out": "*fp16", "hidden": "i32", "BLOCK": "constexpr"},
    "rmsnorm": {"x_ptr": "*bf16", "w_ptr": "*bf16", "out": "*bf16", "hidden": "i32",
                "eps": "fp32", "BLOCK": "constexpr"},
    "softmax": {"x_ptr": "*fp16", "out": "*fp16", "n": "i32", "BLOCK": "constexpr"},
}

Compile = Callable[[str, int], float]
"""``compile(kernel, serial)``: seconds to compile ``kernel``'s source made new by ``serial``."""


def tilec_compiler() -> Compile:
    """tilec's compile to a cubin (everything it needs imported here, before any timing)."""
    import tilec.frontend.astprint  # noqa: F401  (imported by kernel_module at its first call)
    import tilec.frontend.irgen  # noqa: F401
    import tilec.frontend.parser  # noqa: F401
    import tilec.frontend.sema  # noqa: F401
    import tilec.passes  # noqa: F401  (registers the passes)
    from tilec.codegen.ptx import Options, PtxBackend
    from tilec.diagnostics import DiagnosticSink
    from tilec.dialect import make_context
    from tilec.driver import CompileOptions, kernel_module

    def compile_one(name: str, serial: int) -> float:
        text = SOURCES[name] + f"// compile {serial}\n"
        start = time.perf_counter()
        with make_context():
            module = kernel_module(text, f"{name}.tile", CompileOptions(target="ptx"),
                                   DiagnosticSink())
            PtxBackend(Options("sm_90")).run(module, "cubin")
        return time.perf_counter() - start
    return compile_one


def triton_compiler() -> Compile:
    """Triton's offline compile for sm_90; ImportError without Triton."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend  # noqa: F401  (loaded up front)
    from triton.compiler import ASTSource

    def kernels(folder: Path, serial: int) -> ModuleType:
        """The Triton kernels in a module of their own (``triton.jit`` reads its file)."""
        path = folder / f"triton_kernels_{serial}.py"
        path.write_text(TRITON_KERNELS.read_text() + f"# compile {serial}\n")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    def compile_one(name: str, serial: int) -> float:
        with tempfile.TemporaryDirectory(prefix="tilec-bench-") as folder:
            source = ASTSource(fn=getattr(kernels(Path(folder), serial), f"_{name}"),
                               signature=TRITON_SIGNATURES[name], constexprs={"BLOCK": 4096})
            os.environ["TRITON_CACHE_DIR"] = str(Path(folder) / "cache")
            start = time.perf_counter()
            triton.compile(source, target=GPUTarget("cuda", 90, 32))
            return time.perf_counter() - start
    return compile_one


COMPILERS = {"tilec": tilec_compiler, "triton": triton_compiler}


def first_compile(compiler: str, name: str) -> float:
    """Seconds of the first compile of ``name`` in a new process (``--first-in-process``)."""
    done = subprocess.run([sys.executable, __file__, "--first-in-process", compiler, name],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1])
    return float(done.stdout)


def row(name: str, ours: float, theirs: Optional[float], why: str) -> str:
    """One line of a table: the kernel, both times and their ratio (or why Triton has none)."""
    if theirs is None:
        return f"{name:10} {ours:10.3f} {'-':>11}  Triton {why}"
    return f"{name:10} {ours:10.3f} {theirs:11.3f}  tilec takes {ours / theirs:4.2f}x Triton's time"


def measure(label: str, tilec: Callable[[str], float],
            triton: Optional[Callable[[str], float]], why: str) -> None:
    """Print one table: ``label``, then a row per kernel of what ``tilec`` and ``triton``
    (seconds per kernel name) measure."""
    print(f"\n{label}\n{'kernel':10} {'tilec (s)':>10} {'triton (s)':>11}  ratio")
    for name in KERNELS:
        print(row(name, tilec(name), triton(name) if triton else None, why), flush=True)


def main() -> int:
    """Both tables (module docstring); with ``--first-in-process``, one first compile."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="steady-state compiles per kernel")
    parser.add_argument("--first", type=int, default=3,
                        help="new processes per kernel and compiler for the first compile")
    parser.add_argument("--first-in-process", nargs=2, metavar=("COMPILER", "KERNEL"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.first_in_process:
        compiler, name = args.first_in_process
        print(COMPILERS[compiler]()(name, 0))
        return 0

    tilec = tilec_compiler()
    serial = iter(range(1, 1 << 30))
    try:
        triton, why = triton_compiler(), ""
    except ImportError as e:
        triton, why = None, f"not installed ({e})"
    for name in KERNELS:                 # this process compiles each kernel once
        tilec(name, next(serial))
        try:
            if triton is not None:
                triton(name, next(serial))
        except Exception as e:  # a Triton that cannot compile offline here: say so, go on
            triton, why = None, f"failed: {type(e).__name__}: {e}"

    def steady(compile_one: Compile) -> Callable[[str], float]:
        return lambda name: statistics.median(compile_one(name, next(serial))
                                              for _ in range(args.repeat))

    def first(compiler: str) -> Callable[[str], float]:
        return lambda name: statistics.median(first_compile(compiler, name)
                                              for _ in range(args.first))

    if args.first:
        measure(f"First compile in a new process (median of {args.first} processes)",
                first("tilec"), first("triton") if triton else None, why)
    measure(f"Steady state: a new source per compile (median of {args.repeat})",
            steady(tilec), steady(triton) if triton else None, why)
    return 0


if __name__ == "__main__":
    sys.exit(main())

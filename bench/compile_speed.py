"""Compile speed: tilec's in-process compile of swiglu, rmsnorm and softmax to PTX (and cubin)
against Triton compiling equivalent kernels offline for sm_90 (``triton.compile`` with
``GPUTarget("cuda", 90, 32)`` needs no GPU).

    .venv/bin/python bench/compile_speed.py [--repeat N]

Prints, per kernel, the median wall time of a cold compile (caches off: tilec's in-process
compile never caches; Triton's cache goes to a fresh directory each time).  Triton is not a
dependency of tilec: without it, its column says so and the script still reports tilec.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

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


def tilec_compile(name: str) -> float:
    import tilec.passes  # noqa: F401  (registers the passes)
    from tilec.codegen.ptx import Options, PtxBackend
    from tilec.diagnostics import DiagnosticSink
    from tilec.dialect import make_context
    from tilec.driver import CompileOptions, kernel_module

    start = time.perf_counter()
    with make_context():
        module = kernel_module(SOURCES[name], f"{name}.tile", CompileOptions(target="ptx"),
                               DiagnosticSink())
        PtxBackend(Options("sm_90")).run(module, "cubin")
    return time.perf_counter() - start


TRITON_KERNELS = '''
import triton
import triton.language as tl

@triton.jit
def swiglu(inp, out, hidden, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x = tl.load(inp + row * 2 * hidden + cols, mask=mask).to(tl.float32)
    g = tl.load(inp + row * 2 * hidden + hidden + cols, mask=mask).to(tl.float32)
    tl.store(out + row * hidden + cols, (x * g * tl.sigmoid(g)).to(tl.float16), mask=mask)

@triton.jit
def rmsnorm(x_ptr, w_ptr, out, hidden, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x = tl.load(x_ptr + row * hidden + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.rsqrt(tl.sum(x * x, axis=0) / hidden + eps)
    tl.store(out + row * hidden + cols, (x * r * w).to(tl.bfloat16), mask=mask)

@triton.jit
def softmax(x_ptr, out, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out + row * n + cols, (e / tl.sum(e, axis=0)).to(tl.float16), mask=mask)
'''

TRITON_SIGNATURES = {
    "swiglu": {"inp": "*fp16", "out": "*fp16", "hidden": "i32", "BLOCK": "constexpr"},
    "rmsnorm": {"x_ptr": "*bf16", "w_ptr": "*bf16", "out": "*bf16", "hidden": "i32",
                "eps": "fp32", "BLOCK": "constexpr"},
    "softmax": {"x_ptr": "*fp16", "out": "*fp16", "n": "i32", "BLOCK": "constexpr"},
}


def triton_compile(name: str, module) -> float:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    with tempfile.TemporaryDirectory() as cache:
        os.environ["TRITON_CACHE_DIR"] = cache
        source = ASTSource(fn=getattr(module, name), signature=TRITON_SIGNATURES[name],
                           constexprs={"BLOCK": 4096})
        start = time.perf_counter()
        triton.compile(source, target=GPUTarget("cuda", 90, 32))
        return time.perf_counter() - start


def triton_module():
    """The Triton kernels above as a module (``triton.jit`` needs their source file), or the
    reason Triton cannot run here."""
    try:
        import importlib.util
        path = Path(tempfile.mkdtemp(prefix="tilec-bench-")) / "triton_kernels.py"
        path.write_text(TRITON_KERNELS)
        spec = importlib.util.spec_from_file_location("triton_kernels", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module, ""
    except ImportError as e:
        return None, f"not installed ({e})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    module, why = triton_module()
    print(f"{'kernel':10} {'tilec (s)':>10} {'triton (s)':>11}  ratio")
    for name in SOURCES:
        tilec_compile(name)                      # warm: imports, libdevice, the NVPTX target
        ours = statistics.median(tilec_compile(name) for _ in range(args.repeat))
        if module is None:
            print(f"{name:10} {ours:10.3f} {'-':>11}  Triton {why}")
            continue
        try:
            triton_compile(name, module)
            theirs = statistics.median(triton_compile(name, module) for _ in range(args.repeat))
        except Exception as e:  # a Triton that cannot compile offline here: say so, go on
            print(f"{name:10} {ours:10.3f} {'-':>11}  Triton failed: {type(e).__name__}: {e}")
            continue
        print(f"{name:10} {ours:10.3f} {theirs:11.3f}  "
              f"tilec takes {ours / theirs:4.2f}x Triton's time")
    return 0


if __name__ == "__main__":
    sys.exit(main())

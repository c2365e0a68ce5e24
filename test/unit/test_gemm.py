"""Matmul kernels on the CPU GEMM (``tilec/runtime/cpu_gemm.c``) against the reference: every
layout the gemm schedule reads in place (plain, transposed weight, batched, weight broadcast
over the batch), float32/bfloat16/float16 operands, a fused epilogue with several outputs,
at the awkward sizes 1, 7, 127, 255 and 1000, on both micro-kernels (x86-64-v4's in this
process where the CPU has AVX-512, x86-64-v3's in a child with TILEC_CPU=x86-64-v3), both the
packed path (M > 16) and the streamed one (M <= 16)."""
from __future__ import annotations

import functools
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from conftest import cpu_flags

import tilec
from tilec.harness.numerics import assert_close
from tilec.frontend import compile_source
from tilec.harness.reference import allowed, run

SOURCE = """
func plain(x: Tensor<f32>[m, k], w: Tensor<f32>[k, n]) -> Tensor<f32>[m, n] {
  return x @ w;
}
func linear(x: Tensor<f32>[m, k], w: Tensor<f32>[n, k]) -> Tensor<f32>[m, n] {
  return x @ transpose(w, perm=[1, 0]);
}
func batched(x: Tensor<f32>[b, m, k], w: Tensor<f32>[b, k, n]) -> Tensor<f32>[b, m, n] {
  return x @ w;
}
func shared(x: Tensor<f32>[b, m, k], w: Tensor<f32>[k, n]) -> Tensor<f32>[b, m, n] {
  return x @ w;
}
func shared_linear(x: Tensor<f32>[b, m, k], w: Tensor<f32>[b, n, k]) -> Tensor<f32>[b, m, n] {
  return x @ transpose(w, perm=[0, 2, 1]);
}
func fused(x: Tensor<f32>[m, k], w: Tensor<f32>[n, k], bias: Tensor<f32>[n],
           res: Tensor<f32>[m, n]) -> (Tensor<f32>[m, n], Tensor<f32>[m, n]) {
  let h = x @ transpose(w, perm=[1, 0]) + bias;
  return (gelu(h) + res, h * 0.5);
}
func bf16(x: Tensor<bf16>[m, k], w: Tensor<bf16>[n, k]) -> Tensor<f32>[m, n] {
  return cast(x @ transpose(w, perm=[1, 0]), f32);
}
func bf16_shared(x: Tensor<bf16>[b, m, k], w: Tensor<bf16>[k, n]) -> Tensor<bf16>[b, m, n] {
  return x @ w;
}
func bf16_plain(x: Tensor<bf16>[m, k], w: Tensor<bf16>[k, n]) -> Tensor<f32>[m, n] {
  return cast(x @ w, f32);
}
func f16(x: Tensor<f16>[m, k], w: Tensor<f16>[k, n], bias: Tensor<f16>[n]) -> Tensor<f16>[m, n] {
  return relu(x @ w + bias);
}
func f16_linear(x: Tensor<f16>[m, k], w: Tensor<f16>[n, k]) -> Tensor<f32>[m, n] {
  return cast(x @ transpose(w, perm=[1, 0]), f32);
}
func f16_wide(x: Tensor<f16>[m, k], w: Tensor<f16>[k, n]) -> Tensor<f32>[m, n] {
  return cast(x @ w, f32);
}
"""

SIZES = (1, 7, 127, 255, 1000)
# (m, n, k): every size as each of M, N and K, with the other two small and large
SHAPES = sorted({s for v in SIZES for s in ((v, 7, 127), (7, v, 255), (127, 255, v),
                                             (v, 1000, 7), (255, v, 1))})
RNG = np.random.default_rng(17)


@functools.lru_cache(maxsize=1)
def reference_module():
    return compile_source(SOURCE, "gemm.tile")
BF16 = ml_dtypes.bfloat16


@pytest.fixture(scope="module")
def lib():
    return tilec.compile_string(SOURCE, "gemm.tile")


def rand(shape, dtype=np.float32):
    """Multiples of 1/4 in [-1, 1]: every product and every partial sum of a matmul is exact
    in float32, so that the result does not depend on the order of the sums (the numerical
    contract's float32 tolerance is tighter than the rounding of a long sum near zero), and a
    wrong index or a dropped block shows at once."""
    return (RNG.integers(-4, 5, shape) / 4).astype(dtype)


def arguments(name: str, m: int, n: int, k: int) -> list[np.ndarray]:
    b = 3
    return {
        "plain": lambda: [rand((m, k)), rand((k, n))],
        "linear": lambda: [rand((m, k)), rand((n, k))],
        "batched": lambda: [rand((b, m, k)), rand((b, k, n))],
        "shared": lambda: [rand((b, m, k)), rand((k, n))],
        "shared_linear": lambda: [rand((b, m, k)), rand((b, n, k))],
        "fused": lambda: [rand((m, k)), rand((n, k)), rand(n), rand((m, n))],
        "bf16": lambda: [rand((m, k), BF16), rand((n, k), BF16)],
        "bf16_shared": lambda: [rand((b, m, k), BF16), rand((k, n), BF16)],
        "bf16_plain": lambda: [rand((m, k), BF16), rand((k, n), BF16)],
        "f16": lambda: [rand((m, k), np.float16), rand((k, n), np.float16),
                        rand(n, np.float16)],
        "f16_linear": lambda: [rand((m, k), np.float16), rand((n, k), np.float16)],
        "f16_wide": lambda: [rand((m, k), np.float16), rand((k, n), np.float16)],
    }[name]()


def agrees(lib, name: str, m: int, n: int, k: int) -> None:
    args = arguments(name, m, n, k)
    got = getattr(lib, name)(*args)
    want = run(reference_module(), name, *args)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        assert_close(g, w, w.dtype)


FUNCTIONS = ("plain", "linear", "batched", "shared", "shared_linear", "fused", "bf16",
             "bf16_plain",
             "bf16_shared", "f16", "f16_linear", "f16_wide")


@pytest.mark.parametrize("name", FUNCTIONS)
def test_matches_the_reference(lib, name):
    shapes = SHAPES if name in ("plain", "linear", "fused") else SHAPES[::3]
    for m, n, k in shapes:
        agrees(lib, name, m, n, k)


def test_every_kernel_runs_on_the_gemm():
    """Each function is one kernel of the gemm schedule: no transposed or broadcast copy of
    the weight is made by a kernel of its own."""
    from tilec.driver import CompileOptions, kernel_module
    from tilec.diagnostics import DiagnosticSink
    from tilec.dialect import KERNEL_ATTR, make_context
    from tilec.mlir import ir
    schedules = {}
    with make_context():
        module = kernel_module(SOURCE, "gemm.tile", CompileOptions(), DiagnosticSink())
        ops = list(module.body.operations)
    for op in ops:
        if KERNEL_ATTR in op.attributes:
            name = ir.StringAttr(op.attributes["sym_name"]).value.split("__")[0]
            kernel = ir.DictAttr(op.attributes[KERNEL_ATTR])
            schedules.setdefault(name, []).append(ir.StringAttr(kernel["schedule"]).value)
    assert schedules == {name: ["gemm"] for name in FUNCTIONS}


CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
import ast, os, tilec, test_gemm
lib = tilec.compile_string(test_gemm.SOURCE, "gemm.tile")
SHAPES = ast.literal_eval(os.environ["TILEC_TEST_SHAPES"])
for name in sys.argv[2:]:
    for m, n, k in SHAPES:
        test_gemm.agrees(lib, name, m, n, k)
"""
CHILD_SHAPES = ((1, 255, 127), (7, 1000, 255), (127, 255, 1000), (255, 7, 1))


def agrees_in_child(cpu: str, names, shapes=CHILD_SHAPES) -> None:
    env = dict(os.environ, TILEC_CPU=cpu, TILEC_TEST_SHAPES=repr(shapes))
    done = subprocess.run([sys.executable, "-c", CHILD, os.path.dirname(__file__), *names],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def test_matches_the_reference_on_the_avx2_code():
    """TILEC_CPU=x86-64-v3: the 6 x 16 micro-kernel and the AVX2 streaming code."""
    agrees_in_child("x86-64-v3", FUNCTIONS)


def test_half_types_match_the_reference_on_the_avx512_code():
    """TILEC_CPU=x86-64-v4 keeps AMX off: bfloat16 and float16 operands widened to float32
    into the 14 x 32 micro-kernel, where this process (on a CPU with AMX) runs AMX's tiles."""
    agrees_in_child("x86-64-v4", ("bf16", "bf16_shared", "f16", "f16_wide"))


def test_bfloat16_matches_the_reference_on_the_dot_products():
    """TILEC_CPU=x86-64-v4+bf16 keeps AMX off but not AVX512-BF16: bfloat16 operands of more
    than 16 rows run vdpbf16ps on AMX's packing (14 x 32 tiles, K padded to blocks of 32),
    and 8 to 16 rows stream the weight's rows two at a time into it (an odd K, columns past
    the last 16)."""
    if "avx512_bf16" not in cpu_flags():
        pytest.skip("this CPU has no AVX512-BF16")
    agrees_in_child("x86-64-v4+bf16", ("bf16", "bf16_shared", "bf16_plain"),
                    CHILD_SHAPES + ((16, 1000, 255), (9, 37, 1001), (12, 64, 4097)))


FLUSH_CHILD = """
import sys
import ml_dtypes, numpy as np, tilec
sys.path.insert(0, sys.argv[1])
import test_gemm
lib = tilec.compile_string(test_gemm.SOURCE, "gemm.tile")
x = np.full((64, 64), 2.0 ** -130, ml_dtypes.bfloat16)
print(float(lib.bf16(x, np.full((64, 64), 2.0 ** 100, ml_dtypes.bfloat16))[0, 0]))
"""


@pytest.mark.parametrize("cpu,want", [("x86-64-v4", 2.0 ** -24), ("x86-64-v4+bf16", 0.0)])
def test_the_dot_products_run_where_asked(cpu, want):
    """Which kernel ran, seen in a subnormal bfloat16: vdpbf16ps (like AMX) reads it as zero,
    the FMA kernel widens it exactly (64 terms of 2**-130 * 2**100 = 2**-24, far below
    float32's atol: both are within the contract)."""
    if "avx512_bf16" not in cpu_flags():
        pytest.skip("this CPU has no AVX512-BF16")
    done = subprocess.run([sys.executable, "-c", FLUSH_CHILD, os.path.dirname(__file__)],
                          env=dict(os.environ, TILEC_CPU=cpu), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert float(done.stdout) == want


def test_bfloat16_tiles_at_their_edges(lib):
    """The AMX path's K blocks of 32 and tiles of 32 x 32 (the AVX-512 path where the CPU
    has no AMX): K of 31, 33 and 1000, M and N across tile edges, a K block override of 48."""
    for m, n, k in ((33, 31, 31), (64, 64, 33), (95, 97, 1000), (32, 32, 32)):
        agrees(lib, "bf16", m, n, k)
        agrees(lib, "bf16_shared", m, n, k)
    blocked = tilec.compile_string(SOURCE, "gemm.tile", gemm_tile="40x96x48")
    agrees(blocked, "bf16_shared", 100, 130, 200)


def test_float16_products_are_exact_to_float32(lib):
    """float16 operands with a float32 result, the weight [K, N] or [N, K] (on AMX: each
    element split into two bfloat16, four tile products) meet float32's tolerance, not float16's or bfloat16's: full-precision
    float16 values (11 significant bits, subnormals among them), so that keeping only the
    high bfloat16 part of either operand is off by about 2**-9 of a term."""
    for m, n, k in ((100, 300, 1000), (33, 31, 31), (64, 64, 33), (40, 1, 70)):
        x = (RNG.standard_normal((m, k)) * np.exp2(RNG.integers(-16, 4, (m, k))))
        w = RNG.standard_normal((k, n)) * np.exp2(RNG.integers(-16, 4, (k, n)))
        x, w = x.astype(np.float16), w.astype(np.float16)
        for name, weight in (("f16_wide", w), ("f16_linear", np.ascontiguousarray(w.T))):
            (want,), (allowance,) = allowed(reference_module(), name, x, weight)
            assert_close(getattr(lib, name)(x, weight), want, np.float32, allowance)


def test_float16_infinities_and_nans_survive_the_split(lib):
    """Operands with an infinity or a NaN stay on the FMA kernel (split, the low parts' zeros
    would meet the infinity: 0 x inf = NaN): a column with +inf gives +inf, one with NaN
    gives NaN, the others their sums."""
    x = np.ones((40, 64), np.float16)
    w = np.ones((64, 50), np.float16)
    w[3, 7], w[5, 9] = np.inf, np.nan
    for got in (lib.f16_wide(x, w), lib.f16_linear(x, np.ascontiguousarray(w.T))):
        assert np.all(got[:, 7] == np.inf) and np.all(np.isnan(got[:, 9]))
        np.testing.assert_array_equal(np.delete(got, [7, 9], axis=1), 64.0)


@pytest.mark.parametrize("m", [1, 5, 16])
def test_small_m_splits_k_and_columns(lib, m):
    """The streamed path, B's rows contiguous: K split (at least 256 rows a split; their sums
    added in split order) and, where M x N passes 16384 sums, N in blocks: K = 1000 in three
    splits, N = 2100 in blocks of 1024 for M = 16 (the last of 52 columns, 4 past the last
    vector); exact sums, so a split dropped or added twice shows."""
    for name in ("plain", "bf16_shared", "f16"):
        agrees(lib, name, m, 2100, 1000)


@pytest.mark.parametrize("m", [3, 16])
def test_small_m_sums_of_a_page_wide_row(lib, m):
    """The streamed path where N is a multiple of 1024: its float32 sums' rows, a multiple of
    4 KiB long, are stored a line further apart (else all of a group's rows fall in one set
    of L1); the splits' adds and the epilogue read them at that stride.  K = 600 in two
    splits, exact sums."""
    for name in ("plain", "bf16_shared", "f16"):
        agrees(lib, name, m, 1024, 600)


def test_one_thread_gives_the_same_bits():
    """The GEMM's sums do not depend on how the work is shared out: the packed path and the
    streamed one (M = 5, K in 11 splits)."""
    probe = ("import sys, numpy as np, tilec; sys.path.insert(0, sys.argv[1]); "
             "import test_gemm as t; lib = tilec.compile_string(t.SOURCE, 'gemm.tile'); "
             "r = np.random.default_rng(3); x = r.standard_normal((300, 700), np.float32); "
             "w = r.standard_normal((513, 700), np.float32); "
             "y = r.standard_normal((5, 3000), np.float32); "
             "v = r.standard_normal((3000, 2100), np.float32); "
             "sys.stdout.buffer.write(lib.linear(x, w).tobytes() + lib.plain(y, v).tobytes())")
    outs = []
    for threads in ("1", "2"):
        env = dict(os.environ, TILEC_NUM_THREADS=threads)
        done = subprocess.run([sys.executable, "-c", probe, os.path.dirname(__file__)],
                              env=env, capture_output=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        outs.append(done.stdout)
    assert outs[0] == outs[1]


def test_a_gemm_tile_override_changes_nothing_but_speed():
    """tile-kernel's gemm=MxNxK (a tile that does not divide the problem, and K blocks of 16)
    gives the same results."""
    fused = SOURCE[SOURCE.index("func fused"):SOURCE.index("func bf16")]
    lib = tilec.compile_string(fused, "gemm.tile", gemm_tile="18x64x16")
    for m, n, k in ((100, 90, 70), (255, 1000, 127)):
        agrees(lib, "fused", m, n, k)


O0_SOURCE = """
func sliced(x: Tensor<f32>[m, k], w: Tensor<f32>[k, n]) -> Tensor<f32>[m, 3] {
  return (x @ w)[:, 1:4] * 2.0;
}
func linear(x: Tensor<f32>[m, k], w: Tensor<f32>[n, k]) -> Tensor<f32>[m, n] {
  return relu(x @ transpose(w, perm=[1, 0]));
}
"""


def test_at_O0_only_an_element_wise_epilogue_runs_on_the_gemm():
    """At -O0 a function is one kernel: a slice of the product reads the accumulator
    elsewhere than it stores, so that kernel keeps the rows schedule; both agree."""
    lib = tilec.compile_string(O0_SOURCE, "o0.tile", opt_level=0)
    module = compile_source(O0_SOURCE, "o0.tile")
    for m, n, k in ((7, 9, 127), (40, 255, 33)):
        x, w = rand((m, k)), rand((k, n))
        assert_close(lib.sliced(x, w), run(module, "sliced", x, w), np.float32)
        wt = rand((n, k))
        assert_close(lib.linear(x, wt), run(module, "linear", x, wt), np.float32)
    from tilec.driver import CompileOptions, kernel_module
    from tilec.diagnostics import DiagnosticSink
    from tilec.dialect import KERNEL_ATTR, make_context
    from tilec.mlir import ir
    with make_context():
        kernels = kernel_module(O0_SOURCE, "o0.tile", CompileOptions(opt_level=0),
                                DiagnosticSink())
        schedules = {ir.StringAttr(op.attributes["sym_name"]).value:
                     ir.StringAttr(ir.DictAttr(op.attributes[KERNEL_ATTR])["schedule"]).value
                     for op in kernels.body.operations if KERNEL_ATTR in op.attributes}
    assert schedules == {"sliced": "rows", "linear": "gemm"}


@pytest.mark.parametrize("m", [3, 40])
def test_a_long_k_is_summed_whole(lib, m):
    """K = 8192 (16 blocks of 512; the streamed path for M = 3): exact sums, so a dropped or
    repeated K block would show by at least 1/16 in some element."""
    agrees(lib, "linear", m, 70, 8192)
    agrees(lib, "shared", m, 33, 8192)


def test_bfloat16_dot_products_take_k_in_blocks(lib):
    """bfloat16 x @ transpose(w) for up to 16 rows of A (vdpbf16ps where the CPU has
    AVX512-BF16): from 8 rows K in blocks of 512 for all the rows before the next block, the
    last block short, its tail masked (fewer rows: K whole, the tail masked); exact sums, so
    a block dropped or counted twice shows."""
    for m in (1, 5, 16):
        agrees(lib, "bf16", m, 70, 1100)


def test_many_rows_run_in_passes(lib):
    """More than the runtime's 2048 rows per pass (its accumulators are bounded): a batch of 3
    x 1000 rows sharing one weight, and 2100 plain rows."""
    agrees(lib, "shared", 1000, 40, 30)
    agrees(lib, "plain", 2100, 9, 17)


def test_every_small_m_streams_each_column_group(lib):
    """M = 1..16 (the streamed path): the sums of a group of rows of A (16, 12, 8, 6, 4, 3, 2
    or 1) by a group of columns held in registers over 16 rows of B at a time (groups of 8,
    4, 2 or 1 vectors by M), the vectors left over one at a time and the columns past the
    last vector the plain way: N = 200 and K = 130 leave some of each; float32 and bfloat16
    weights."""
    for m in range(1, 17):
        agrees(lib, "plain", m, 200, 130)
        agrees(lib, "bf16_shared", m, 200, 130)


_THREADS = """
import os, sys
import tilec
sys.path.insert(0, sys.argv[1])
import test_gemm as t
lib = tilec.compile_string(t.SOURCE, "gemm.tile")
def threads():
    return len(os.listdir("/proc/self/task"))
before = threads()
for m, n, k in ((64, 64, 64), (256, 256, 256), (1, 512, 512), (16, 128, 1024)):
    t.agrees(lib, "plain", m, n, k)
small = threads()
t.agrees(lib, "plain", 320, 320, 320)
print(before, small, threads())
"""


def test_a_small_matmul_runs_on_the_caller_alone():
    """Waking the pool costs 20-50 us, more than a second thread saves on a matmul of up to
    2^24 products (256^3 took 195 us alone, 220 on two threads) or a small-M one reading up
    to 1 MiB of weight: those run on the caller, and the pool (started by the first launch
    it shares) has no thread yet; 320^3 starts it."""
    env = dict(os.environ, TILEC_NUM_THREADS="2")
    done = subprocess.run([sys.executable, "-c", _THREADS, os.path.dirname(__file__)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    before, small, big = map(int, done.stdout.split())
    assert small == before and big == before + 1

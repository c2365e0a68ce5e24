"""The CPU backend (tilec.codegen.cpu) against the reference interpreter: every function is
kernelized whole (tile-kernel{all=true}), compiled, linked into a .so with the system C
compiler and called through the kernel ABI over its whole grid, in one call and in three row
ranges, at sizes 1, 7, 127, 255 and 1000 where they are cheap."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import ml_dtypes
import numpy as np
import pytest

from conftest import OPS, cpu_level
from tilec.codegen.cpu import mathlib
from tilec.codegen.cpu.kernel import STREAM_MIN_BYTES, _rounded_narrow, lower_kernels
from tilec.codegen.cpu.llvm import mlir_to_llvm_ir
from tilec.diagnostics import DiagnosticSink
from tilec.dialect import make_context
from tilec.dialect.walk import nested_ops
from tilec.driver import CompileOptions, kernel_module
from tilec.mlir import ir
from tilec.harness.numerics import assert_close
from tilec.harness.reference import run
from cpu_harness import Built, build, call, check
from test_kernel_level import PROGRAMS

RNG = np.random.default_rng(11)
BF16 = ml_dtypes.bfloat16


def rand(shape, dtype=np.float32, scale: float = 2.0) -> np.ndarray:
    if dtype == np.int32:
        return RNG.integers(-1000, 1000, shape).astype(np.int32)
    return (RNG.standard_normal(shape) * scale).astype(dtype)


@pytest.fixture(scope="module")
def examples(tmp_path_factory) -> dict[str, Built]:
    return {name: build((OPS / f"{name}.tile").read_text(), tmp_path_factory.mktemp(name),
                        f"{name}.tile")
            for name in ("swiglu", "layernorm", "rmsnorm_templated", "rope")}


@pytest.mark.parametrize("pieces", [1, 3])
@pytest.mark.parametrize("shape", [(1, 1, 2), (2, 7, 254), (1, 3, 2000)])
def test_swiglu(examples, shape, pieces):
    check(examples["swiglu"], "swiglu", rand(shape, np.float16), pieces=pieces)


@pytest.mark.parametrize("lead", [(), (1,), (3, 5), (2, 7, 3)])
@pytest.mark.parametrize("n", [1, 127, 1000])
def test_layernorm(examples, lead, n):
    check(examples["layernorm"], "layernorm", rand(lead + (n,), np.float16), pieces=2)


@pytest.mark.parametrize("seq, hidden", [(1, 1), (7, 255), (127, 1000)])
def test_rmsnorm(examples, seq, hidden):
    check(examples["rmsnorm_templated"], "rmsnorm", rand((seq, hidden), BF16),
          rand(hidden, BF16), 1e-6, pieces=3)


@pytest.mark.parametrize("tokens, heads, half", [(1, 1, 1), (7, 3, 64), (5, 2, 127)])
def test_rope(examples, tokens, heads, half):
    check(examples["rope"], "rotary_emb", rand((tokens, heads, 2 * half), np.float16),
          rand((tokens, 2 * half)), pieces=3)


# ---------------------------------------------------------------------------------------------
# The programs of test_kernel_level (their grids: leading reductions, strided rows...)


@pytest.fixture(scope="module")
def kernel_level(tmp_path_factory) -> Built:
    source = "\n".join(re.sub(r"^func f\(", f"func program_{name}(", text)
                       for name, (text, *_rest) in PROGRAMS.items())
    return build(source, tmp_path_factory.mktemp("kernel_level"))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_kernel_level_programs(kernel_level, name):
    _text, shapes, _grid, _alt = PROGRAMS[name]
    for grow in (0, 6):   # the shapes of test_kernel_level, then larger and odd ones
        args = [rand(tuple(d + grow if d > 1 else d for d in s)) for s in shapes]
        if name == "concat_leading":   # both parts share their last dimension
            args[1] = rand((args[1].shape[0], args[0].shape[1]))
        if name == "matmul_bias":
            args[1], args[2] = rand((args[0].shape[1], 9)), rand(9)
        if name == "bias_rank_generic":
            args[1] = rand(args[0].shape[-2:])
        check(kernel_level, f"program_{name}", *args, pieces=3)


# ---------------------------------------------------------------------------------------------
# Every built-in, one function each


@dataclass(frozen=True)
class Case:
    params: str
    result: str
    body: str
    args: Callable[[int, int], list]     # (m, n) -> arguments


A, K = 3, 5   # the other symbols


def xs(*dtypes) -> Callable[[int, int], list]:
    """Arguments of shape [m, n], one per dtype."""
    return lambda m, n: [rand((m, n), d) for d in dtypes]


def x_and(extra: Callable[[int, int], tuple], dtype=np.float32) -> Callable[[int, int], list]:
    return lambda m, n: [rand((m, n), dtype), rand(extra(m, n))]


def amn(dtype=np.float32) -> Callable[[int, int], list]:
    return lambda m, n: [rand((A, m, n), dtype)]


def compared(m: int, n: int) -> list:
    x, y = rand((m, n)), rand((m, n))
    y[:, ::3] = x[:, ::3]          # equal elements, for == and <=
    return [x, y]


UNARY = ("exp", "log", "sqrt", "rsqrt", "abs", "neg", "reciprocal", "sigmoid", "tanh", "relu",
         "silu", "gelu", "gelu_tanh", "sin", "cos")
BINARY = {"add": "x + y", "sub": "x - y", "mul": "x * y", "div": "x / y", "max": "max(x, y)",
          "min": "min(x, y)", "pow": "pow(abs(x), y)"}
PREDICATES = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
REDUCE = ("sum", "mean", "max", "min", "var")
MN = "x: Tensor<f32>[m, n]"
F32 = "Tensor<f32>[m, n]"

BUILTINS: dict[str, Case] = {
    **{f"unary_{op}": Case(MN, F32, f"return {op}(x);", xs(np.float32)) for op in UNARY},
    **{f"unary16_{op}": Case("x: Tensor<f16>[m, n]", "Tensor<f16>[m, n]", f"return {op}(x);",
                             xs(np.float16))
       for op in ("exp", "log", "tanh", "gelu", "sin", "rsqrt")},
    **{f"unary_bf16_{op}": Case("x: Tensor<bf16>[m, n]", "Tensor<bf16>[m, n]",
                                f"return {op}(x);", xs(BF16)) for op in ("silu", "gelu")},
    **{f"binary_{op}": Case(f"{MN}, y: Tensor<f32>[n]", F32, f"return {e};",
                            x_and(lambda m, n: (n,)))
       for op, e in BINARY.items()},
    **{f"pow_{name}": Case(MN, F32, f"return pow(x, {c});", xs(np.float32))
       for name, c in (("one", "1.0"), ("square", "2.0"), ("cube", "3.0"),
                       ("inverse", "-1.0"), ("half", "0.5"))},
    **{f"where_{p}": Case(f"{MN}, y: {F32}", F32, f"return where(x {s} y, x, y * 2.0);",
                          compared) for p, s in PREDICATES.items()},
    "cast_round_trips": Case(MN, "(Tensor<f32>[m, n], Tensor<f32>[m, n], Tensor<f16>[m, n])",
                             "return (cast(cast(x, f16), f32), cast(cast(x, bf16), f32) * 100.0, "
                             "cast(cast(x, bf16), f16));", xs(np.float32)),
    "cast_on_return": Case(MN, "(Tensor<bf16>[m, n], Tensor<f16>[m, n])",
                           "return (x * 1000.0, x * 1000.0);", xs(np.float32)),
    "cast_int": Case(MN, "(Tensor<i32>[m, n], Tensor<f32>[m, n], Tensor<f16>[m, n])",
                     "let i = cast(x * 100.0, int32); return (i, cast(i, f32) + 0.5, "
                     "cast(i, f16));", xs(np.float32)),
    "int_ops": Case("x: Tensor<i32>[m, n], y: Tensor<i32>[n], k: int32 = 3",
                    "(Tensor<i32>[m, n], Tensor<f32>[m, n])",
                    "let a = max(x * y - k, min(-x, y)) + x; "
                    "return (where(a > 0, a, -a), cast(a, f32) * 0.5);",
                    lambda m, n: [rand((m, n), np.int32), rand(n, np.int32)]),
    **{f"reduce_{k}_last": Case(MN, "Tensor<f32>[m, 1]", f"return reduce_{k}(x, axes=[-1]);",
                                xs(np.float32)) for k in REDUCE},
    **{f"reduce_{k}_first": Case(MN, "Tensor<f32>[n]",
                                 f"return reduce_{k}(x, axes=[0], keepdims=false);",
                                 xs(np.float32)) for k in REDUCE},
    **{f"reduce_{k}_middle": Case("x: Tensor<f32>[a, m, n]", "Tensor<f32>[a, 1, n]",
                                  f"return reduce_{k}(x, axes=[-2]);", amn()) for k in REDUCE},
    **{f"reduce_{k}_all": Case(MN, "Tensor<f32>[]",
                               f"return reduce_{k}(x, axes=[0, 1], keepdims=false);",
                               xs(np.float32)) for k in REDUCE},
    "reduce_outer_inner": Case("x: Tensor<f32>[a, m, n]", "Tensor<f32>[1, m, 1]",
                               "return reduce_sum(x, axes=[0, 2]) * 0.5;", amn()),
    "softmax_last": Case(MN, F32, "return softmax(x, axis=-1);", xs(np.float32)),
    "softmax_first": Case(MN, F32, "return softmax(x, axis=0);", xs(np.float32)),
    "softmax_last_bf16": Case("x: Tensor<bf16>[m, n]", "Tensor<bf16>[m, n]",
                              "return softmax(x, axis=-1);", xs(ml_dtypes.bfloat16)),
    "softmax_last_f16": Case("x: Tensor<f16>[m, n]", "Tensor<f16>[m, n]",
                             "return cast(softmax(cast(x, float32), axis=-1), float16);",
                             xs(np.float16)),
    "softmax_middle": Case("x: Tensor<f16>[a, m, n]", "Tensor<f16>[a, m, n]",
                           "return softmax(x * 3.0, axis=-2);", amn(np.float16)),
    "transpose_2d": Case(MN, "Tensor<f32>[n, m]", "return transpose(x, perm=[1, 0]) + 1.0;",
                         xs(np.float32)),
    "transpose_3d": Case("x: Tensor<f32>[a, m, n]", "Tensor<f32>[n, a, m]",
                         "return exp(transpose(x, perm=[2, 0, 1]));", amn()),
    "reshape_split": Case("x: Tensor<f32>[m, 2*n]", "Tensor<f32>[m, n, 2]",
                          "return reshape(x, [m, n, 2]) * 2.0;",
                          lambda m, n: [rand((m, 2 * n))]),
    "reshape_merge": Case("x: Tensor<f32>[a, m, n]", "Tensor<f32>[a, m*n]",
                          "return reshape(x - 1.0, [a, m*n]);", amn()),
    "reshape_strided": Case(MN, "Tensor<f32>[n*m]",
                            "return reshape(transpose(x, perm=[1, 0]), [n*m]);", xs(np.float32)),
    "concat_last": Case(f"{MN}, y: Tensor<f32>[m, 3]", "Tensor<f32>[m, n+3]",
                        "return concat(sin(x), y, axis=-1);", x_and(lambda m, n: (m, 3))),
    "concat_first": Case(f"{MN}, y: Tensor<f32>[a, n]", "Tensor<f32>[2*m+a, n]",
                         "return concat(x, y * 2.0, -x, axis=0);", x_and(lambda m, n: (A, n))),
    "concat_then_math": Case(MN, "Tensor<f32>[m, 2*n]", "let c = concat(x, exp(x), axis=1); "
                             "return c * reduce_max(c, axes=[-1]);", xs(np.float32)),
    "matmul_linear": Case("x: Tensor<f32>[m, k], w: Tensor<f32>[k, n], b: Tensor<f32>[n]", F32,
                          "return relu(x @ w + b);",
                          lambda m, n: [rand((m, K)), rand((K, n)), rand(n)]),
    "matmul_batched": Case("x: Tensor<f16>[a, m, k], w: Tensor<f16>[a, k, n]",
                           "Tensor<f16>[a, m, n]", "return x @ w;",
                           lambda m, n: [rand((A, m, K), np.float16, 0.5),
                                         rand((A, K, n), np.float16, 0.5)]),
    "matmul_shared": Case("x: Tensor<f32>[a, m, k], w: Tensor<f32>[k, n]",
                          "Tensor<f32>[a, m, n]", "return matmul(x, w);",
                          lambda m, n: [rand((A, m, K)), rand((K, n))]),
    "slices": Case(MN, "(Tensor<f32>[m, n-1], Tensor<f32>[m-1, n])",
                   "return (x[:, 1:n] * x[:, 0:n-1], x[1:m, :] - x[0:m-1, :]);",
                   xs(np.float32)),
    "scalars": Case("x: Tensor<f32>[m, n], alpha: float32 = 0.5, h: f16 = 0.1, k: int32 = -2",
                    F32, "return x * alpha + cast(h, f32) + cast(k, f32);", xs(np.float32)),
    "scalar_only": Case("a: float32, b: float32 = -1e-3", "float32", "return max(a, b) * 2.0;",
                        lambda m, n: [m - 1.5]),
    "rank_generic": Case("x: Tensor<f32>[..., n], w: Tensor<f32>[n]", "Tensor<f32>[..., n]",
                         "return (x - reduce_max(x, axes=[-1])) * w;",
                         lambda m, n: [rand((2, A, m, n)), rand(n)]),
    "rank_generic_peel": Case("x: Tensor<f32>[..., m, n]", "Tensor<f32>[..., m, n]",
                              "return x - reduce_sum(x, axes=[-2]);",
                              lambda m, n: [rand((2, m, n))]),
    "reused_exp": Case(MN, f"({F32}, {F32})",
                       "let e = exp(x); return (e / reduce_sum(e, axes=[-1]), e * 2.0);",
                       xs(np.float32)),
}


BUILTINS_SOURCE = "\n".join(f"func {name}({c.params}) -> {c.result} {{ {c.body} }}"
                            for name, c in BUILTINS.items())


@pytest.fixture(scope="module")
def builtins(tmp_path_factory) -> Built:
    return build(BUILTINS_SOURCE, tmp_path_factory.mktemp("builtins"))


@pytest.fixture(scope="module")
def builtins_v4(tmp_path_factory) -> Built:
    """The builtins compiled for x86-64-v4: the code a library of the default --arch runs on
    a CPU with AVX-512."""
    if cpu_level() < 4:
        pytest.skip("x86-64-v4 code needs a CPU with AVX-512 F, BW, CD, DQ and VL; tilec's "
                    "runtime finds none here (the CPU lacks them, or TILEC_CPU lowers it)")
    return build(BUILTINS_SOURCE, tmp_path_factory.mktemp("builtins_v4"), arch="x86-64-v4")


SIZES = [(1, 1), (7, 127), (3, 255), (2, 1000)]


def check_builtin(built: Built, name: str) -> None:
    for m, n in SIZES:
        if name == "slices" and 1 in (m, n):
            continue
        args = BUILTINS[name].args(m, n)
        check(built, name, *args)
        check(built, name, *args, pieces=3)


@pytest.mark.parametrize("name", list(BUILTINS))
def test_builtin(builtins, name):
    check_builtin(builtins, name)


@pytest.mark.parametrize("name", list(BUILTINS))
def test_builtin_in_x86_64_v4_code(builtins_v4, name):
    check_builtin(builtins_v4, name)


def test_special_values(builtins):
    """inf, NaN, subnormals and the ends of the float32 range, through every unary op."""
    x = np.array([[0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3.4e38, 88.7, -104.0]], np.float32)
    for op in UNARY:
        check(builtins, f"unary_{op}", x)


NAN_ROWS = 7


def softmax_rows(n: int = 100) -> np.ndarray:
    """The first NAN_ROWS rows make the reference's softmax all NaN (a NaN first, inside, last;
    a NaN with its sign bit set; an inf; all -inf; all NaN), the others it handles (some -inf,
    the largest floats; two spanning 120, where an x - max above 0 would overflow: all
    negative, and of both signs with signed zeros) and an ordinary one."""
    rows = np.tile(rand(n), (12, 1)).astype(np.float32)
    rows[0, 0] = rows[1, n // 2] = rows[2, n - 1] = np.nan
    rows[3, 7] = -np.nan
    rows[4, 40] = np.inf
    rows[5] = -np.inf
    rows[6] = np.nan
    rows[7, ::3] = -np.inf
    rows[8] = 3.4e38
    rows[9, ::2] = -3.4e38
    rows[10] = -np.linspace(1.0, 120.0, n)
    rows[11] = np.linspace(-60.0, 60.0, n)
    rows[11, :2] = (-0.0, 0.0)
    return rows


def test_softmax_special_values(builtins):
    """NaN and inf through each way softmax is lowered: into the output row (last axis; in
    float32, and in bfloat16 and float16, whose max is taken over the bits: see
    ``_Kernel.row_max``), along a column (first axis), and through float16 scratch (middle
    axis)."""
    rows = softmax_rows()
    assert np.signbit(rows[3, 7]) and np.isnan(rows[3, 7])
    got = check(builtins, "softmax_last", rows)[0]
    assert np.isnan(got[:NAN_ROWS]).all() and not np.isnan(got[NAN_ROWS:]).any()
    check(builtins, "softmax_first", rows.T.copy())
    for name, dtype in (("softmax_last_bf16", ml_dtypes.bfloat16),
                        ("softmax_last_f16", np.float16)):
        with np.errstate(over="ignore"):     # the largest floats become inf in float16
            narrow = rows.astype(dtype)
        assert np.signbit(narrow[3, 7])
        got = check(builtins, name, narrow)[0].astype(np.float32)
        assert np.isnan(got[:NAN_ROWS]).all()
    with np.errstate(over="ignore"):     # the largest floats become inf in float16
        check(builtins, "softmax_middle", rows.T[None].astype(np.float16))


def test_signatures(builtins):
    sig = builtins.signature("scalars")
    assert sig.c_symbol == "_mlir_ciface_scalars"
    assert sig.inputs == ("float32", "float32", "float32", "int32")   # float scalars as f32
    assert sig.outputs == ("float32",)
    assert sig.symbols == ("m", "n") and not sig.rank_generic
    generic = builtins.signature("rank_generic")
    assert generic.rank_generic and generic.grid == ("...",)
    assert builtins.signature("cast_int").outputs == ("int32", "float32", "float16")


# Every function the lowered kernels declare, before LLVM optimises them: intrinsics, which must
# read the same in the bindings' LLVM and llvmlite's, and the scratch allocator (no libm).
EMITTED = {"free", "malloc", "llvm.fabs.f32", "llvm.floor.f32", "llvm.maximum.f32",
           "llvm.minimum.f32", "llvm.prefetch.p0", "llvm.roundeven.f64",
           "llvm.smax.i16", "llvm.smax.i32", "llvm.smax.i64", "llvm.smin.i32", "llvm.smin.i64",
           "llvm.sqrt.f32", "llvm.x86.sse.sfence"}


def test_every_emitted_intrinsic_crosses_to_llvmlite(builtins):
    """The builtins use every op, so their module declares every intrinsic the backend emits;
    building them (the fixture) had llvmlite parse, optimise and compile each of them."""
    lowered, _ = lower_kernels(builtins.kernels)
    declared = set(re.findall(r"^declare .*? @([\w.]+)\(", mlir_to_llvm_ir(lowered), re.M))
    assert declared == EMITTED
    optimised = set(re.findall(r"^declare .*? @([\w.]+)\(", builtins.cpu.llvm_ir, re.M))
    assert {name for name in optimised if not name.startswith("llvm.")} == {"malloc", "free"}


# ---------------------------------------------------------------------------------------------
# Outputs of STREAM_MIN_BYTES or more, rows cheap to compute: each row computed into scratch,
# block by block, and copied out with non-temporal stores (a concatenation: whole), in
# launches of several rows


STREAMING = {
    "stream_softmax": ("x: Tensor<f32>[m, n]", "Tensor<f32>[m, n]",
                       "return softmax(x, axis=-1);", np.float32),
    "stream_scale": ("x: Tensor<f16>[m, n]", "Tensor<f16>[m, n]", "return x * 0.5 + 1.0;",
                     np.float16),
    "stream_concat": ("x: Tensor<f32>[m, n]", "Tensor<f32>[m, 2*n]",
                      "return concat(x, x * 2.0, axis=1);", np.float32),
    # a softmax streams each row out during the next row's exponentials (deferred_stream)
    "stream_softmax_f16": ("x: Tensor<f16>[m, n]", "Tensor<f16>[m, n]",
                           "return cast(softmax(cast(x, float32), axis=-1), float16);",
                           np.float16),
    # ... keeping its float16 exponentials in the staging row that the last row waits in
    "stream_softmax_in_f16": ("x: Tensor<f16>[m, n]", "Tensor<f16>[m, n]",
                              "return softmax(x, axis=-1);", np.float16),
}


@pytest.fixture(scope="module")
def streaming(tmp_path_factory) -> Built:
    source = "\n".join(f"func {name}({params}) -> {result} {{ {body} }}"
                       for name, (params, result, body, _dtype) in STREAMING.items())
    return build(source, tmp_path_factory.mktemp("streaming"))


def streamed_rows(name: str, n: int) -> np.ndarray:
    """An argument of ``name`` with rows of ``n`` whose result just reaches STREAM_MIN_BYTES."""
    dtype = STREAMING[name][3]
    row_bytes = n * np.dtype(dtype).itemsize * (2 if name == "stream_concat" else 1)
    return rand((STREAM_MIN_BYTES // row_bytes + 1, n), dtype)


@pytest.mark.parametrize("name", sorted(STREAMING))
@pytest.mark.parametrize("n", [4096, 4099, 1030])   # rows of whole cache lines, and not
def test_streamed_outputs(streaming, name, n):
    check(streaming, name, streamed_rows(name, n), pieces=3)


def test_a_stored_softmax_streams_its_row_out_during_the_next_row():
    """Only a softmax stored (or cast, then stored) and read by nothing else defers its row's
    stream: its kernel keeps the row's place in a scratch cell."""
    deferred = {"return softmax(x, axis=-1);": True,
                "return cast(softmax(cast(x, float32), axis=-1), float16);": True,
                "return softmax(x, axis=-1) * 2.0;": False,
                "return reduce_sum(softmax(x, axis=-1), axes=[-1], keepdims=false);": False}
    results = {True: "Tensor<f16>[m, n]", False: "Tensor<f16>[m]"}
    with make_context():
        for body, expected in deferred.items():
            result = results["reduce_sum" not in body]
            module = kernel_module(f"func g(x: Tensor<f16>[m, n]) -> {result} {{ {body} }}",
                                   "g.tile", CompileOptions(), DiagnosticSink())
            lowered, _ = lower_kernels(module)
            assert ("memref<1xindex>" in str(lowered)) == expected, body


def test_a_softmax_of_16_bit_floats_takes_its_max_over_their_bits():
    """A row of float16 or bfloat16, read as such or through casts, has its max taken as
    integers (``_Kernel.row_max``); float32 rows, and a softmax along a column, keep the
    float max."""
    integer_max = {("f16", "softmax(x, axis=-1)"): True,
                   ("bf16", "softmax(x, axis=-1)"): True,
                   ("f16", "cast(softmax(cast(x, float32), axis=-1), float16)"): True,
                   ("f16", "softmax(cast(cast(x, bf16), f32), axis=-1)"): True,
                   ("f32", "softmax(x, axis=-1)"): False,
                   ("f16", "softmax(x * 2.0, axis=-1)"): False,
                   ("f16", "softmax(x, axis=0)"): False}
    with make_context():
        for (dtype, body), expected in integer_max.items():
            module = kernel_module(f"func g(x: Tensor<{dtype}>[m, n]) -> Tensor<{dtype}>[m, n] "
                                   f"{{ return {body}; }}", "g.tile", CompileOptions(),
                                   DiagnosticSink())
            text = str(lower_kernels(module)[0])
            assert ("arith.maxsi" in text and ": i16" in text) == expected, (dtype, body)
            assert ("arith.maximumf" in text) != expected, (dtype, body)


def test_output_off_its_element_alignment_is_not_streamed(streaming):
    """A float32 output two bytes off a multiple of 4 (NumPy allows it) would put its cache
    lines' boundaries inside elements: it is stored as a small output is, and comes out
    right."""
    x = streamed_rows("stream_softmax", 4099)
    memory = np.zeros(x.nbytes + 4, np.uint8)
    out = memory[2:2 + x.nbytes].view(np.float32).reshape(x.shape)
    assert not out.flags.aligned
    call(streaming, "stream_softmax", [x], [out], pieces=2)
    assert_close(out, run(streaming.reference, "stream_softmax", x), np.dtype(np.float32))


# ---------------------------------------------------------------------------------------------
# mathlib's NARROW precision for values rounded to float16/bfloat16 before anything but a
# product, a quotient or a negation reads them (kernel._rounded_narrow)

# body over x: f16[n] and y: f32[n] -> (result types, the op looked at, whether it is narrow)
NARROW_CASES = {
    "return gelu(x);": ("Tensor<f16>[n]", "tile.gelu", True),
    "return cast(exp(y), bfloat16);": ("Tensor<bf16>[n]", "tile.exp", True),
    "return -(sigmoid(x) * 2.0) / 3.0;": ("Tensor<f16>[n]", "tile.sigmoid", True),
    "return cast(softmax(cast(x, float32), axis=-1), float16);": ("Tensor<f16>[n]",
                                                                  "tile.softmax", True),
    "return softmax(x, axis=-1) * x;": ("Tensor<f16>[n]", "tile.softmax", True),
    "return gelu(x) + 1.0;": ("Tensor<f16>[n]", "tile.gelu", False),
    "return cast(gelu(x), float32);": ("Tensor<f32>[n]", "tile.gelu", False),
    "return exp(y);": ("Tensor<f32>[n]", "tile.exp", False),
    "return cast(softmax(y, axis=-1), float16) + cast(reduce_sum(y, axes=[-1]), float16);":
        ("Tensor<f16>[n]", "tile.softmax", True),
    "let t = tanh(x); return (t, cast(t, float32));": ("(Tensor<f16>[n], Tensor<f32>[n])",
                                                       "tile.tanh", False),
    "let t = tanh(x); return (t, t * 2.0);": ("(Tensor<f16>[n], Tensor<f16>[n])", "tile.tanh",
                                              True),
}


def test_which_values_take_the_narrow_precision():
    source = "\n".join(f"func f{i}(x: Tensor<f16>[n], y: Tensor<f32>[n]) -> {result} {{ {body} }}"
                       for i, (body, (result, _, _)) in enumerate(NARROW_CASES.items()))
    with make_context():
        module = kernel_module(source, "narrow.tile", CompileOptions(), DiagnosticSink())
        for i, (body, (_, op_name, narrow)) in enumerate(NARROW_CASES.items()):
            kernels = [f for f in nested_ops(module.operation, "func.func")
                       if ir.StringAttr(f.attributes["sym_name"]).value.startswith(f"f{i}__k")]
            ops = [op for k in kernels for op in nested_ops(k, op_name)]
            assert len(ops) == 1, body
            assert _rounded_narrow(ops[0].results[0]) == narrow, body


def test_narrow_values_are_computed_with_the_narrow_coefficients():
    """gelu rounded to float16 takes NARROW's erf, the same gelu kept in float32 FULL's: each
    module has the other's leading erf coefficient nowhere."""
    programs = {"narrow": "Tensor<f16>[n] { return gelu(x); }",
                "full": "Tensor<f32>[n] { return cast(gelu(x), float32); }"}
    with make_context(), ir.Location.unknown():
        for name, rest in programs.items():
            module = kernel_module(f"func g(x: Tensor<f16>[n]) -> {rest}", "g.tile",
                                   CompileOptions(), DiagnosticSink())
            lowered, _ = lower_kernels(module)
            text = str(lowered)
            constants = {precision: str(ir.FloatAttr.get(ir.F32Type.get(), p.erf_p[0]))
                         for precision, p in (("narrow", mathlib.NARROW), ("full", mathlib.FULL))}
            assert constants[name] in text
            assert constants["full" if name == "narrow" else "narrow"] not in text


def test_a_narrow_variant_costs_what_its_op_costs():
    """``gelu.narrow`` is still a transcendental: worth keeping in scratch when read twice,
    not worth streaming out (values.Map.expensive)."""
    from tilec.codegen.common.values import Map
    assert Map("gelu.narrow", (), (), "float16").expensive
    assert not Map("mul", (), (), "float16").expensive

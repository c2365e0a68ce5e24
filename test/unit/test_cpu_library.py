"""CPU libraries end to end: ``tilec f.tile -o f.so`` builds them, ``tilec.load`` runs them,
they agree with the reference, their header compiles and C programs call them; ``tilec verify``
passes on the examples and fails on a deliberately broken library."""
from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from conftest import EXAMPLE_NAMES, OPS

import tilec
from tilec.cli import main
from tilec.codegen.cpu import CpuBackend
from tilec.driver import CompileOptions
from tilec.frontend import compile_source
from tilec.harness.numerics import assert_close
from tilec.harness.reference import run
from tilec.harness.verify import verify

CC = os.environ.get("CC") or "cc"
RUNTIME = Path(tilec.__file__).parent / "runtime"
PROGRAMS = """
func two(x: Tensor<f32>[m, n], y: Tensor<f32>[m, n]) -> (Tensor<f32>[m, n], Tensor<f32>[m, 1]) {
  let s = x + y;
  return (s, reduce_sum(s, axes=[-1]));
}
func passthrough(x: Tensor<f32>[m, n])
    -> (Tensor<f32>[m, n], Tensor<f32>[m, n], Tensor<f32>[m, n]) {
  let e = exp(x);
  return (x, e, e);
}
func head4(x: Tensor<bf16>[m, n], k: int32 = 3) -> Tensor<bf16>[m, 4] {
  return x[:, 0:4];
}
func chain(a: Tensor<f32>[m, n], w: Tensor<f32>[n, n]) -> Tensor<f32>[m, n] {
  let c = a @ w;
  let d = c @ w;
  let e = d @ w;
  return (e @ w) + 1.0;
}
func scaled(x: Tensor<f16>[...], s: float16 = 0.1) -> Tensor<f16>[...] {
  return x * s;
}
func counts(x: Tensor<i32>[n], k: int32) -> Tensor<i32>[n] {
  return max(x * k, x);
}
func halve(x: Tensor<f32>[n]) -> Tensor<f32>[n/2] {
  return x[0:n/2];
}
func head4_twice(x: Tensor<bf16>[m, n]) -> Tensor<bf16>[m, 4] {
  return head4(x * 2.0);
}
func softmaxes(x: Tensor<f32>[m, n]) -> Tensor<f32>[m, 1] {
  let b = softmax(x, axis=-1);
  let c = softmax(b, axis=0);
  let d = softmax(c * 50.0, axis=-1);
  return reduce_max(d, axes=[0, 1]) + reduce_sum(d, axes=[-1]);
}
"""


@pytest.fixture(scope="session", autouse=True)
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One library cache for the session (shared by xdist workers, so each library is
    built about once)."""
    base = tmp_path_factory.getbasetemp()
    path = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "tilec-cache"
    old = os.environ.get("TILEC_CACHE_DIR")
    os.environ["TILEC_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        del os.environ["TILEC_CACHE_DIR"]
    else:
        os.environ["TILEC_CACHE_DIR"] = old


def example(name: str, **options):
    return tilec.compile(str(OPS / f"{name}.tile"), **options)


def rand(shape, dtype, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# ---------------------------------------------------------------------------------------------
# The examples against the reference


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_example_matches_the_reference_at_every_size(name: str) -> None:
    report = verify(str(OPS / f"{name}.tile"), CompileOptions(), max_elements=1 << 20)
    assert report.ok, report.table()
    labels = " ".join(c.label for c in report.cases if c.status == "pass")
    if name == "layernorm":     # every extent of '...' given, through the (3, v) cases
        assert all(f"...=(3, {v})" in labels for v in (1, 7, 127, 255, 1000, 4097))
    else:                       # every free symbol at every size, one at a time
        fn = next(iter(tilec.compile(str(OPS / f"{name}.tile")).functions.values()))
        for symbol in fn.symbols:
            assert all(f"{symbol}={v}" in labels for v in (1, 7, 127, 255, 1000, 4097)), symbol


def test_template_sizes_run_their_variant() -> None:
    # perturbing only the seq=2048 variant shows which implementation served each call
    lib = example("rmsnorm_templated", test_break="rmsnorm__seq_2048")
    module = compile_source((OPS / "rmsnorm_templated.tile").read_text(), "rms.tile")
    w = rand(16, ml_dtypes.bfloat16, 1)
    for seq, served_by_variant in [(2048, True), (2047, False), (7, False)]:
        x = rand((seq, 16), ml_dtypes.bfloat16)
        got, want = lib.rmsnorm(x, w), run(module, "rmsnorm", x, w)
        assert not np.array_equal(got[0, 0], want[0, 0]) == served_by_variant, seq
        assert_close(got[1:], want[1:], "bfloat16")


def test_no_generic_refuses_other_sizes() -> None:
    lib = example("rmsnorm_templated", no_generic=True)
    w = rand(16, ml_dtypes.bfloat16, 1)
    x = rand((2048, 16), ml_dtypes.bfloat16)
    assert_close(lib.rmsnorm(x, w), run(compile_source(
        (OPS / "rmsnorm_templated.tile").read_text(), "rms.tile"), "rmsnorm", x, w), "bfloat16")
    with pytest.raises(ValueError, match=r"rmsnorm: no variant for argument shapes \(7, 16\), "
                                         r"\(16,\) \(variants: seq = 2048; seq = 8192; "
                                         r"seq = 32768\) and no generic kernel"):
        lib.rmsnorm(rand((7, 16), ml_dtypes.bfloat16), w)
    # the C entry itself refuses too (the symbols come from the caller there)
    entry = lib.cdll.rmsnorm
    entry.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 2 + [ctypes.c_float,
                                                                     ctypes.c_void_p]
    assert entry(None, None, None, 7, 16, 1e-6, None) == 3
    assert lib.last_error() == ("rmsnorm: no variant for seq = 7 (variants: seq = 2048; "
                                "seq = 8192; seq = 32768) and no generic kernel (compiled with "
                                "--no-generic)")


# ---------------------------------------------------------------------------------------------
# Host schedules: several results, copies, checks, intermediates, scalars


@pytest.fixture(scope="module")
def programs():
    return tilec.compile_string(PROGRAMS, "programs.tile"), compile_source(PROGRAMS, "p.tile")


def test_several_results_into_out(programs) -> None:
    lib, module = programs
    x, y = rand((5, 9), np.float32, 1), rand((5, 9), np.float32, 2)
    out = (np.empty((5, 9), np.float32), np.empty((5, 1), np.float32))
    got = lib.two(x, y, out=out)
    assert got[0] is out[0] and got[1] is out[1]
    for g, w in zip(got, run(module, "two", x, y)):
        assert_close(g, w, "float32")
    # with no columns the sums are still written: zeros
    empty = np.empty((5, 0), np.float32)
    sums = np.full((5, 1), np.nan, np.float32)
    lib.two(empty, empty, out=(np.empty((5, 0), np.float32), sums))
    np.testing.assert_array_equal(sums, np.zeros((5, 1)))


def test_results_that_no_kernel_writes_are_copied(programs) -> None:
    lib, _ = programs
    x = rand((3, 4), np.float32)
    same, e1, e2 = lib.passthrough(x)
    np.testing.assert_array_equal(same, x)
    assert same is not x
    np.testing.assert_array_equal(e1, e2)
    assert_close(e1, np.exp(x.astype(np.float64)), "float32")


def test_a_failing_shape_check_names_its_source_line(programs) -> None:
    lib, _ = programs
    np.testing.assert_array_equal(lib.head4(rand((3, 6), ml_dtypes.bfloat16))[:, :4].shape,
                                  (3, 4))
    with pytest.raises(RuntimeError, match=r"^programs.tile:12:17: slice out of range: end '4' "
                                           r"exceeds dimension 'n' \(4 = 4, n = 3\)$"):
        lib.head4(rand((2, 3), ml_dtypes.bfloat16))
    with pytest.raises(RuntimeError, match=r"^programs.tile:12:17 \(inlined at "
                                           r"programs.tile:30:10\): slice out of range: end '4' "
                                           r"exceeds dimension 'n' \(4 = 4, n = 3\)$"):
        lib.head4_twice(rand((2, 3), ml_dtypes.bfloat16))


def test_intermediates_between_kernels(programs) -> None:
    lib, module = programs
    rng = np.random.default_rng(3)     # small integers: every float32 sum is exact
    a = rng.integers(-2, 3, (33, 6)).astype(np.float32)
    w = rng.integers(-1, 2, (6, 6)).astype(np.float32)
    np.testing.assert_array_equal(lib.chain(a, w), run(module, "chain", a, w))


def test_scalars(programs) -> None:
    lib, module = programs
    x = rand((2, 3, 4), np.float16)
    # a float16 scalar is rounded to float16 before use, as the reference does
    np.testing.assert_array_equal(lib.scaled(x, 0.1), run(module, "scaled", x, 0.1))
    np.testing.assert_array_equal(lib.scaled(x), run(module, "scaled", x))
    n = np.arange(-4, 5, dtype=np.int32)
    np.testing.assert_array_equal(lib.counts(n, 3), np.maximum(n * 3, n))


def test_intermediates_share_memory_where_tile_reuse_says(programs) -> None:
    from tilec.codegen.common.host import generate
    from tilec.diagnostics import DiagnosticSink
    from tilec.dialect import make_context
    from tilec.driver import kernel_module

    with make_context():
        module = kernel_module(PROGRAMS, "p.tile", CompileOptions(), DiagnosticSink())
        source = generate(module, name="p", source="p.tile", arch="x86-64-v3",
                          target=CpuBackend.host).source
    chain = source[source.index("/* chain */"):]
    chain = chain[:chain.index("\n}\n")]
    # c, d and e are intermediates; e takes c's buffer (tile.reuse), so two buffers suffice;
    # each of the four matmul kernels runs on the CPU GEMM
    assert chain.count("(status = tilec_gemm_") == 4
    assert "void* buf[2] = {0};" in chain
    assert chain.count("tilec_alloc(") == 2


def test_a_softmax_stored_where_tile_reuse_says(programs) -> None:
    """softmaxes' d takes b's buffer (tile.reuse), so its kernel keeps the exponentials in
    scratch, not in that buffer as it would in a buffer of its own."""
    lib, module = programs
    x = rand((37, 100), np.float32)
    assert_close(lib.softmaxes(x), run(module, "softmaxes", x), "float32")


def test_the_c_entry_checks_what_its_caller_passes(programs) -> None:
    lib, _ = programs
    halve = lib.cdll.halve
    halve.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_int64, ctypes.c_void_p]
    assert halve(None, None, 7, None) == 2        # TILEC_ERR_CHECK: the slice's bound
    assert re.fullmatch(r"programs\.tile:\d+:14: slice bound 'n/2' \(n of 'x'\) is not an "
                        r"integer \(n = 7\)", lib.last_error())
    assert halve(None, None, 1 << 62, None) == 1
    assert lib.last_error() == "halve: argument 'x' has too many elements"
    with pytest.raises(ValueError, match=r"halve: result 0 dimension 0 is n/2 = 7/2, not a "
                                         "non-negative integer"):
        lib.halve(np.zeros(7, np.float32))
    np.testing.assert_array_equal(lib.halve(np.arange(6, dtype=np.float32)), [0, 1, 2])
    layernorm = example("layernorm").cdll.layernorm
    layernorm.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_int64,
                                                  ctypes.POINTER(ctypes.c_int64), ctypes.c_void_p]
    lead = (ctypes.c_int64 * 2)(3, -5)
    error = example("layernorm").last_error
    assert layernorm(None, None, 0, None, None) == 1
    assert error() == ("layernorm: lead_rank is 0, but the '...' of its parameters stands for "
                       "1 to 32 dimensions here")
    assert layernorm(None, None, 2, None, None) == 1
    assert error() == "layernorm: lead_dims is NULL, with lead_rank 2"
    assert layernorm(None, None, 2, lead, None) == 1
    assert error() == "layernorm: lead_dims[1] is -5, a negative extent"


def test_the_generated_host_code_compiles_without_warnings(tmp_path: Path) -> None:
    from tilec.codegen.common.host import generate
    from tilec.diagnostics import DiagnosticSink
    from tilec.dialect import make_context
    from tilec.driver import kernel_module

    rmsnorm = (OPS / "rmsnorm_templated.tile").read_text()
    for text, options, broken in [(PROGRAMS, CompileOptions(), "two"),
                                  (PROGRAMS, CompileOptions(opt_level=0), "scaled"),
                                  (rmsnorm, CompileOptions(no_generic=True), "rmsnorm__seq_2048")]:
        with make_context():
            module = kernel_module(text, "p.tile", options, DiagnosticSink())
            host = generate(module, name="p", source="p.tile", arch="x86-64-v3",
                            test_break=broken, target=CpuBackend.host)
        (tmp_path / "host.c").write_text(host.source)
        (tmp_path / "p.h").write_text(host.header)
        subprocess.run([CC, "-c", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{RUNTIME}",
                        "-o", str(tmp_path / "host.o"), str(tmp_path / "host.c")], check=True)
        subprocess.run([CC, "-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-x", "c++",
                        str(tmp_path / "p.h")], check=True)


def test_compile_refuses_an_unknown_option() -> None:
    with pytest.raises(TypeError, match="unknown compile option 'optimize'; options: target, "):
        tilec.compile(str(OPS / "swiglu.tile"), optimize=3)


def test_defined_symbols_leave_the_abi() -> None:
    lib = example("swiglu", defines={"hidden": 4})
    assert lib.swiglu.symbols == ["batch", "seq"]
    x = rand((2, 3, 8), np.float16)
    assert lib.swiglu(x).shape == (2, 3, 4)
    with pytest.raises(ValueError, match="swiglu: argument 'input' dimension 2: expected 8, "
                                         "got 6"):
        lib.swiglu(x[..., :6].copy())


def test_o0_compiles_each_function_as_its_own_kernel(tmp_path: Path) -> None:
    lib = tilec.compile_string(PROGRAMS, "programs.tile", opt_level=0)
    x, y = rand((4, 3), np.float32, 1), rand((4, 3), np.float32, 2)
    s, total = lib.two(x, y)
    assert_close(total, (x.astype(np.float64) + y).sum(-1, keepdims=True), "float32")


# ---------------------------------------------------------------------------------------------
# The command line, the files it writes, the header


def test_so_and_header_are_written_beside_each_other(tmp_path: Path) -> None:
    out = tmp_path / "lib" / "swiglu.so"
    assert main([str(OPS / "swiglu.tile"), "-o", str(out)]) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["swiglu.h", "swiglu.so"]
    assert oct(out.stat().st_mode & 0o777) == oct(0o666 & ~_umask())
    header = (tmp_path / "lib" / "swiglu.h").read_text()
    assert ("int swiglu(const void* input, void* out_0, int64_t batch, int64_t seq, "
            "int64_t hidden, void* stream);") in header
    assert " *   out_0: output, float16 [batch, seq, hidden]" in header
    lib = tilec.load(out)
    x = rand((2, 3, 8), np.float16)
    assert_close(lib.swiglu(x), run(compile_source((OPS / "swiglu.tile").read_text(), "s"),
                                    "swiglu", x), "float16")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_emit_obj_writes_the_kernels_object(tmp_path: Path) -> None:
    """One relocatable object, with each kernel's code for x86-64-v3 and for x86-64-v4 by
    default, for one arch with another."""
    for arch, symbols in (([], {"_mlir_ciface_swiglu__k0", "_mlir_ciface_swiglu__k0__x86_64_v4"}),
                          (["--arch", "x86-64-v3"], {"_mlir_ciface_swiglu__k0"})):
        out = tmp_path / "k.o"
        assert main([str(OPS / "swiglu.tile"), "--emit=obj", "-o", str(out), *arch]) == 0
        assert out.read_bytes()[:4] == b"\x7fELF"
        listed = subprocess.run(["nm", "--defined-only", str(out)], capture_output=True,
                                text=True, check=True).stdout
        assert {line.split()[-1] for line in listed.splitlines()
                if "_mlir_ciface_" in line} == symbols
        assert " T _mlir_ciface_swiglu__k0\n" in listed     # global: to be linked with


def test_an_unknown_cpu_arch_is_named_with_the_known_ones(tmp_path: Path, capsys) -> None:
    assert main([str(OPS / "swiglu.tile"), "--arch", "pentium", "-o", str(tmp_path / "f.so")]) == 1
    assert "error: unknown --arch 'pentium' for --target cpu; expected one of x86-64-v3+v4, " \
        "x86-64-v3, x86-64-v4, native" in capsys.readouterr().err
    assert not (tmp_path / "f.so").exists()


def test_a_failing_compile_leaves_the_output_untouched(tmp_path: Path, capsys) -> None:
    out = tmp_path / "f.so"
    out.write_bytes(b"previous")
    bad = tmp_path / "bad.tile"
    bad.write_text("func f(x: Tensor[n]) -> Tensor[n] { return y; }\n")
    assert main([str(bad), "-o", str(out)]) == 1
    assert "bad.tile:1:44: error: unknown name 'y'" in capsys.readouterr().err
    # a C compiler that fails, after the kernels were built
    old = os.environ.get("CC")
    os.environ["CC"] = "false"
    try:
        assert main([str(OPS / "swiglu.tile"), "-o", str(out)]) == 1
    finally:
        os.environ.pop("CC") if old is None else os.environ.update(CC=old)
    assert "the C compiler failed to link the library" in capsys.readouterr().err
    assert out.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.tile", "f.so"]


def test_a_missing_c_compiler_is_a_clear_error(tmp_path: Path, capsys) -> None:
    old = os.environ.get("CC")
    os.environ["CC"] = str(tmp_path / "no-such-cc")
    try:
        assert main([str(OPS / "swiglu.tile"), "-o", str(tmp_path / "f.so")]) == 1
    finally:
        os.environ.pop("CC") if old is None else os.environ.update(CC=old)
    assert f"no C compiler '{tmp_path / 'no-such-cc'}'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


C_PROGRAM = r"""
#include <stdio.h>
#include <string.h>
#include "swiglu.h"
int main(void) {
  _Float16 x[2 * 3 * 4], y[2 * 3 * 2];
  for (int i = 0; i < 24; i++) x[i] = (_Float16)((i % 4) - 1);  /* rows: -1 0 1 2 */
  if (swiglu(x, y, 2, 3, 2, NULL) != TILEC_OK) return 1;
  for (int i = 0; i < 12; i++) printf("%.4f ", (double)y[i]);
  printf("\n%d %s\n", swiglu(x, y, 2, -3, 2, NULL), tilec_last_error());
  return 0;
}
"""


def test_a_c_program_calls_the_library_through_its_header(tmp_path: Path) -> None:
    assert main([str(OPS / "swiglu.tile"), "-o", str(tmp_path / "swiglu.so")]) == 0
    for lang in ("c", "c++"):
        subprocess.run([CC, "-fsyntax-only", "-Wall", "-Werror", "-x", lang,
                        str(tmp_path / "swiglu.h")], check=True)
    (tmp_path / "main.c").write_text(C_PROGRAM)
    subprocess.run([CC, "-o", str(tmp_path / "main"), str(tmp_path / "main.c"),
                    str(tmp_path / "swiglu.so"), f"-Wl,-rpath,{tmp_path}"], check=True,
                   cwd=tmp_path)
    lines = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    # x = (-1, 0), gate = (1, 2): x * silu(gate) = (-0.7311, 0)
    assert lines[0].split() == ["-0.7310", "0.0000"] * 6
    assert lines[1] == "1 swiglu: symbol seq is -3, a negative extent"


TWO_LIBRARIES = r"""
#include <stdio.h>
#include "swiglu.h"
#include "scale.h"
int main(void) {
  float x[4] = {1, 2, 3, 4}, y[4];
  int status = scale(x, y, -4, NULL);
  printf("%d %s\n", status, tilec_last_error());
  status = scale(x, y, 4, NULL);
  printf("%d [%s] %g\n", status, tilec_last_error(), (double)y[3]);
  return 0;
}
"""


def test_a_program_linking_two_libraries_reads_the_error_of_the_one_that_failed(
        tmp_path: Path) -> None:
    (tmp_path / "scale.tile").write_text(
        "func scale(x: Tensor<f32>[n]) -> Tensor<f32>[n] {\n  return x * 2.0;\n}\n")
    assert main([str(OPS / "swiglu.tile"), "-o", str(tmp_path / "swiglu.so")]) == 0
    assert main([str(tmp_path / "scale.tile"), "-o", str(tmp_path / "scale.so")]) == 0
    (tmp_path / "main.c").write_text(TWO_LIBRARIES)
    # swiglu.so comes first: without one error slot for both, the program's
    # tilec_last_error() would be swiglu's, which never failed
    subprocess.run([CC, "-o", str(tmp_path / "main"), str(tmp_path / "main.c"),
                    str(tmp_path / "swiglu.so"), str(tmp_path / "scale.so"),
                    f"-Wl,-rpath,{tmp_path}"], check=True, cwd=tmp_path)
    lines = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    assert lines == ["1 scale: symbol n is -4, a negative extent", "0 [] 8"]


def test_c_names_that_clash_get_a_suffix(tmp_path: Path) -> None:
    source = ("func half(int: Tensor<f32>[n], n: Tensor<f32>[n], stream: float32 = 2.0) -> "
              "Tensor<f32>[n] { return int * n * stream; }\n")
    lib = tilec.compile_string(source, "names.tile")
    header = Path(lib.path).with_suffix(".h").read_text()
    assert ("int half_(const void* int_, const void* n, void* out_0, int64_t n_, float stream, "
            "void* stream_);") in header
    subprocess.run([CC, "-fsyntax-only", "-Wall", "-Werror", "-x", "c++",
                    str(Path(lib.path).with_suffix(".h"))], check=True)
    a, b = rand(5, np.float32, 1), rand(5, np.float32, 2)
    assert_close(lib.half(a, b), a.astype(np.float64) * b * 2.0, "float32")


def test_verify_passes_and_fails_on_an_injected_break() -> None:
    env = {**os.environ, "TILEC_TEST_BREAK_KERNEL": ""}
    command = [sys.executable, "-m", "tilec.cli", "verify", str(OPS / "swiglu.tile"),
               "--max-elements", "100000"]
    ok = subprocess.run(command, capture_output=True, text=True, env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "verify swiglu.tile: swiglu:" in ok.stderr
    env["TILEC_TEST_BREAK_KERNEL"] = "swiglu"
    broken = subprocess.run(command, capture_output=True, text=True, env=env)
    assert broken.returncode == 1
    table = broken.stdout.splitlines()
    assert table[0].split() == ["function", "case", "max", "abs", "max", "rel", "result",
                                "shapes"]
    assert table[1].split()[:4] == ["swiglu", "batch=7", "seq=7", "hidden=7"]
    assert table[1].split()[-4:] == ["FAIL", "(7,", "7,", "14)"]
    assert "first at (0, 0, 0)" in broken.stdout
    # 24 cases: (7, 7, 7), 5 more sizes per symbol, 5 more all at once, 3 random; 11 of
    # them hold more than 100000 elements (3 * batch * seq * hidden)
    assert table[-1] == "13 cases: 0 passed, 0 rejected by both, 13 failed; 11 skipped"


def test_verify_streams_its_table_and_sums_up_after_it() -> None:
    """With stdout and stderr in one pipe (2>&1): the build, the header, every row, then the
    function's line and the counts, in that order."""
    done = subprocess.run([sys.executable, "-m", "tilec.cli", "verify",
                           str(OPS / "layernorm.tile")], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout
    assert re.fullmatch(r"verify layernorm.tile: built for cpu in [\d.]+ m?s", lines[0])
    assert lines[1].split()[:2] == ["function", "case"]
    assert all(line.startswith("layernorm  ") for line in lines[2:13])
    assert re.fullmatch(r"verify layernorm.tile: layernorm: 11 cases, 0 failed "
                        r"\([\d.]+ m?s\)", lines[13])
    assert lines[14:] == ["11 cases: 10 passed, 1 rejected by both, 0 failed; 0 skipped"]


def test_verify_keeps_what_ran_when_interrupted() -> None:
    """Ctrl-C (SIGINT) during the cases: the rows so far stay printed, the counts follow,
    with a line saying the run was interrupted; exit status 130."""
    # with the cap at 10**9 the case of every symbol at 255 (50 million elements) takes
    # seconds: the signal comes before the end
    child = subprocess.Popen([sys.executable, "-m", "tilec.cli", "verify",
                              str(OPS / "swiglu.tile"), "--max-elements", str(10**9)],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    first = [child.stdout.readline(), child.stdout.readline()]   # the header and one row
    child.send_signal(signal.SIGINT)
    rest = child.stdout.read().splitlines()
    assert child.wait() == 130
    assert first[1].startswith("swiglu  ")
    assert rest[-1] == "interrupted (Ctrl-C): the cases above are all that ran"
    ran = int(rest[-2].split()[0])
    assert 1 <= ran < 24 and len([ln for ln in [first[1], *rest] if ln.startswith("swiglu  ")]) \
        == ran


def test_verify_stops_at_a_ctrl_c_that_python_swallowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A KeyboardInterrupt raised where Python swallows it (in a finalizer the garbage
    collector runs) still stops the cases: the run says it was interrupted."""
    from tilec.harness import verify as harness
    real, calls = harness._case, []

    def case(*args, **kwargs):
        calls.append(args)
        if len(calls) == 2:
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)             # the handler runs, and raises, here
            except KeyboardInterrupt:
                pass                      # as Python does with one raised in a finalizer
        return real(*args, **kwargs)

    monkeypatch.setattr(harness, "_case", case)
    report = verify(str(OPS / "swiglu.tile"), CompileOptions(), max_elements=1 << 12)
    assert report.interrupted and len(calls) == 2


@pytest.mark.parametrize("target", ["cpu", "ptx", "ascend-sim"])
def test_the_library_exports_every_function_its_header_declares(target: str,
                                                                 tmp_path: Path) -> None:
    library = tmp_path / "swiglu.so"
    assert main([str(OPS / "swiglu.tile"), "--target", target, "-o", str(library)]) == 0
    declared = set(re.findall(r"^(?:int|const char\*) (\w+)\(", (tmp_path / "swiglu.h")
                              .read_text(), re.MULTILINE))
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True,
                             text=True, check=True).stdout.split()
    assert {"swiglu", "tilec_last_error", "tilec_metadata"} <= declared
    assert declared <= set(symbols)


def test_help_lists_every_command(capsys) -> None:
    """``tilec --help`` names every command, each of which answers --help itself."""
    from tilec.cli import opt_main

    with pytest.raises(SystemExit):
        main(["--help"])
    listed = capsys.readouterr().out.split("other commands (each with its own --help):\n")[1]
    names = [line.split()[:2] for line in listed.splitlines()]
    assert names == [["tilec", "verify"], ["tilec", "bench"], ["tilec", "cache"],
                     ["tilec-opt", "FILE.mlir"]]
    for command in (["verify", "--help"], ["cache", "--help"]):
        with pytest.raises(SystemExit) as done:
            main(command)
        assert done.value.code == 0 and capsys.readouterr().out.startswith("usage: tilec ")
    with pytest.raises(SystemExit):
        opt_main(["--help"])
    assert capsys.readouterr().out.startswith("usage: tilec-opt ")


def test_output_to_a_pipe_or_device_writes_into_it(tmp_path: Path) -> None:
    """-o naming something that is not a regular file (a pipe here; /dev/null for a user) is
    written to, not replaced by a new file: as root, replacing /dev/null broke the machine."""
    import stat
    import threading

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(pipe.read_bytes()), daemon=True)
    reader.start()
    assert main([str(OPS / "swiglu.tile"), "--emit=ir", "-o", str(pipe)]) == 0
    reader.join(timeout=30)
    assert stat.S_ISFIFO(pipe.stat().st_mode)
    assert b"func.func @swiglu" in got[0]


@pytest.mark.parametrize("target", ["cpu", "ascend-sim"])
def test_the_runtime_compiles_once_per_process(target: str, monkeypatch) -> None:
    """Two libraries built in one process link one object of the runtime: the C compiler
    sees cpu_runtime.c once (its GEMM half is the slowest file of a link)."""
    from tilec.codegen.common import link
    link._runtime_object.cache_clear()
    commands: list[list[str]] = []
    compile_in = link.compile_in

    def recorded(work: Path, args: list[str], language: str) -> None:
        commands.append(args)
        compile_in(work, args, language)

    monkeypatch.setattr(link, "compile_in", recorded)
    for k in (2, 3):
        lib = tilec.compile_string(f"func f(x: Tensor<f32>[n]) -> Tensor<f32>[n] "
                                   f"{{ return x * {k}.0; }}", "once.tile", target, cache=False)
        assert np.array_equal(lib.f(np.ones(3, np.float32)), np.full(3, k, np.float32))
    assert sum("cpu_runtime.c" in args for args in commands) == 1

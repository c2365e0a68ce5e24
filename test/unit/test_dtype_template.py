"""``#pragma dtype_template`` (language 1.1, issue 15): one function per dtype (C entries
``NAME__float16``...), one Python entry ``NAME`` dispatching on the arguments' dtype, and
``-D T=...`` for one dtype under the plain name; on ``cpu`` and ``ascend-sim`` against the
reference and NumPy, through ptx (ptxas), the header, ``tilec verify``, ``tilec.torch`` and
CMake's ``tilec_add_kernel``."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tilec
from tilec.cli import main
from tilec.frontend import compile_source
from tilec.harness.numerics import assert_close
from tilec.harness.reference import run

SCALE = """
#pragma dtype_template(T, [float16, bfloat16, float32])
func scale(x: Tensor<T>[n, d], w: Tensor<T>[d], eps: T = 0.5) -> Tensor<T>[n, d] {
  let y = cast(x, float32) * cast(w, float32) + cast(eps, float32);
  return cast(y, T);
}
"""
DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32}
CONFIGS = [pytest.param("cpu", 2, id="cpu"), pytest.param("ascend-sim", 2, id="ascend-sim")]


def arguments(dtype: str, n: int = 7, d: int = 33) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(len(dtype))
    return (rng.standard_normal((n, d)).astype(DTYPES[dtype]),
            rng.standard_normal(d).astype(DTYPES[dtype]))


@pytest.mark.parametrize("target,opt", CONFIGS)
def test_one_entry_dispatches_each_dtype(target: str, opt: int) -> None:
    lib = tilec.compile_string(SCALE, "scale.tile", target=target, opt_level=opt)
    assert sorted(lib.functions) == ["scale__bfloat16", "scale__float16", "scale__float32"]
    module = compile_source(SCALE, "scale.tile")
    for dtype in DTYPES:
        x, w = arguments(dtype)
        got = lib.scale(x, w)
        assert got.dtype == DTYPES[dtype]
        assert_close(got, np.asarray(run(module, f"scale__{dtype}", x, w)), dtype)
        want = (x.astype(np.float64) * w.astype(np.float64) + 0.5).astype(DTYPES[dtype])
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=1e-2 if dtype != "float32" else 1e-6, atol=1e-2)
        np.testing.assert_array_equal(getattr(lib, f"scale__{dtype}")(x, w, eps=0.25),
                                      lib.scale(x, w, eps=0.25))


def test_a_dtype_no_instance_has_names_the_argument() -> None:
    lib = tilec.compile_string(SCALE, "scale.tile")
    with pytest.raises(TypeError, match=r"scale: argument 'x' has dtype int32; T of scale is "
                                        r"one of .*float16.*"):
        lib.scale(np.ones((2, 3), np.int32), np.ones(3, np.int32))
    with pytest.raises(TypeError, match=r"scale: argument 'w' has dtype float32, but 'x' makes "
                                        r"T float16"):
        lib.scale(np.ones((2, 3), np.float16), np.ones(3, np.float32))
    with pytest.raises(TypeError, match="missing argument 'w'"):
        lib.scale(np.ones((2, 3), np.float16))


def test_define_builds_one_dtype_under_the_plain_name() -> None:
    lib = tilec.compile_string(SCALE, "scale.tile", defines={"T": "bfloat16"})
    assert list(lib.functions) == ["scale"]
    x, w = arguments("bfloat16")
    module = compile_source(SCALE, "scale.tile")
    assert_close(lib.scale(x, w), np.asarray(run(module, "scale__bfloat16", x, w)), "bfloat16")
    with pytest.raises(TypeError, match="'x'"):
        lib.scale(*arguments("float32"))


def test_header_declares_every_instance_and_ptxas_accepts_them(tmp_path: Path) -> None:
    source = tmp_path / "scale.tile"
    source.write_text(SCALE)
    assert main([str(source), "-o", str(tmp_path / "scale.so")]) == 0
    header = (tmp_path / "scale.h").read_text()
    for dtype in DTYPES:
        assert f"int scale__{dtype}(const void* x, const void* w, void* out_0, int64_t n, " \
               f"int64_t d, float eps, void* stream);" in header
    assert main([str(source), "--target", "ptx", "--emit=cubin",
                 "-o", str(tmp_path / "scale.cubin")]) == 0
    assert (tmp_path / "scale.cubin").stat().st_size > 0


def test_verify_checks_each_instance(tmp_path: Path, capsys) -> None:
    source = tmp_path / "scale.tile"
    source.write_text(SCALE)
    assert main(["verify", str(source), "--max-elements", "20000"]) == 0
    table = capsys.readouterr().out
    for dtype in DTYPES:
        assert f"scale__{dtype}" in table


def test_torch_registers_each_instance() -> None:
    torch = pytest.importorskip("torch")
    import tilec.torch
    ops = tilec.torch.register(tilec.compile_string(SCALE, "scale.tile"), "t_dtype_template")
    for dtype in ("float16", "bfloat16", "float32"):
        x = torch.randn(4, 6).to(getattr(torch, dtype))
        w = torch.randn(6).to(getattr(torch, dtype))
        got = getattr(ops, f"scale__{dtype}")(x, w, 0.5)
        assert got.dtype == x.dtype
        torch.testing.assert_close(got, (x.float() * w.float() + 0.5).to(x.dtype))


CMAKE_PROJECT = """
cmake_minimum_required(VERSION 3.20)
project(dtype_template LANGUAGES C)
find_package(tilec CONFIG REQUIRED)
tilec_add_kernel(scale SOURCES scale.tile TARGET cpu)
add_executable(demo main.c)
target_link_libraries(demo PRIVATE scale)
"""
CMAKE_MAIN = """
#include <stdio.h>
#include "scale.h"
int main(void) {
  float x[2] = {1.0f, 2.0f}, w[2] = {3.0f, 4.0f}, a[2];
  if (scale__float32(x, w, a, 1, 2, 0.5f, NULL)) return 1;
  printf("%g %g\\n", a[0], a[1]);
  return 0;
}
"""


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_cmake_builds_a_dtype_template(tmp_path: Path) -> None:
    source, build = tmp_path / "src", tmp_path / "build"
    source.mkdir()
    (source / "scale.tile").write_text(SCALE)
    (source / "CMakeLists.txt").write_text(CMAKE_PROJECT)
    (source / "main.c").write_text(CMAKE_MAIN)
    tilec_bin = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{tilec_bin}{os.pathsep}{os.environ['PATH']}"}
    package = Path(tilec.__file__).parent / "cmake"
    for command in (["-S", source, "-B", build, f"-Dtilec_DIR={package}"], ["--build", build]):
        done = subprocess.run(["cmake", *map(str, command)], env=env, capture_output=True,
                              text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    demo = subprocess.run([build / "demo"], capture_output=True, text=True)
    assert (demo.returncode, demo.stdout) == (0, "3.5 8.5\n"), demo.stderr


def test_a_one_dtype_template_and_a_result_only_template() -> None:
    text = """
#pragma dtype_template(T, [float32])
func one(x: Tensor<T>[n], y: Tensor<f16>[n]) -> Tensor<T>[n] {
  return x * cast(y, T);
}
#pragma dtype_template(U, [float16, float32])
func made(x: Tensor<f32>[n]) -> Tensor<U>[n] {
  return cast(x, U);
}
"""
    lib = tilec.compile_string(text, "t.tile", opt_level=0)
    x, y = np.arange(3, dtype=np.float32), np.full(3, 2, np.float16)
    np.testing.assert_array_equal(lib.one(x, y), x * 2)
    with pytest.raises(TypeError, match="'y'"):
        lib.one(x, x)
    with pytest.raises(TypeError, match="made: no tensor argument decides U; call one of "
                                        "made__float16, made__float32"):
        lib.made(x)
    assert lib.made__float16(x).dtype == np.float16

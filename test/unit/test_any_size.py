"""Every valid program compiles and agrees with the reference at any size (issue 16): the
reproducers found by random programs, each on ``cpu``, ``cpu -O0`` and ``ascend-sim``."""
from __future__ import annotations

import ctypes
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from conftest import has_avx512

import tilec
from tilec.cli import main
from tilec.frontend import compile_source
from tilec.harness.numerics import assert_close
from tilec.harness.reference import run

CONFIGS = [pytest.param("cpu", 2, id="cpu"), pytest.param("cpu", 0, id="cpu-O0"),
           pytest.param("ascend-sim", 2, id="ascend-sim")]

COLSUM = """
func colsum(x: Tensor<float32>[n, d]) -> Tensor<float32>[d] {
  return reduce_sum(x, axes=[0], keepdims=false);
}
"""
RESHAPE = """
func f(q0: Tensor<float32>[cols, cols]) -> Tensor<float32>[cols, cols, 1] {
  return reshape(q0, [cols, cols, 1]);
}
"""
BF16_MIN = """
func scalar(x: Tensor<bfloat16>[n, m], s: bfloat16) -> bfloat16 {
  return reduce_min(x, axes=[0, 1], keepdims=false) - s;
}
func rows(x: Tensor<bfloat16>[n, m], s: bfloat16) -> Tensor<bfloat16>[n, 1] {
  return reduce_min(x, axes=[1]) - s;
}
"""


def agrees(text: str, fn: str, args: list[Any], target: str, opt: int,
           defines: dict[str, int] | None = None, **options: Any) -> None:
    lib = tilec.compile_string(text, "t.tile", target=target, opt_level=opt,
                               defines=defines or {}, **options)
    got = getattr(lib, fn)(*args)
    want = run(compile_source(text, "t.tile"), fn, *args)
    assert_close(np.asarray(got), np.asarray(want), str(np.asarray(want).dtype))


@pytest.mark.parametrize("target,opt", CONFIGS)
def test_a_column_sum_compiles_at_any_fixed_size(target: str, opt: int) -> None:
    x = np.random.default_rng(1).standard_normal((4096, 4096)).astype(np.float32)
    agrees(COLSUM, "colsum", [x], target, opt, {"n": 4096, "d": 4096})


@pytest.mark.parametrize("target,opt", CONFIGS)
def test_a_column_sum_agrees_with_symbolic_sizes(target: str, opt: int) -> None:
    x = np.random.default_rng(2).standard_normal((1000, 77)).astype(np.float32)
    agrees(COLSUM, "colsum", [x], target, opt)


@pytest.mark.parametrize("target,opt", CONFIGS)
@pytest.mark.parametrize("cols", [1, 2, 3, 17])
def test_a_reshape_that_appends_an_axis(target: str, opt: int, cols: int) -> None:
    q0 = np.random.default_rng(cols).standard_normal((cols, cols)).astype(np.float32)
    agrees(RESHAPE, "f", [q0], target, opt)


@pytest.mark.parametrize("target,opt", CONFIGS)
@pytest.mark.parametrize("fn", ["scalar", "rows"])
def test_bfloat16_results_of_a_reduction_load_and_agree(target: str, opt: int, fn: str) -> None:
    x = np.random.default_rng(3).standard_normal((37, 70)).astype(ml_dtypes.bfloat16)
    agrees(BF16_MIN, fn, [x, 0.5], target, opt)


@pytest.mark.parametrize("arch", ["x86-64-v3", "x86-64-v4"])
def test_bfloat16_libraries_of_each_cpu_code_load(arch: str, tmp_path) -> None:
    """Each code on its own: a library that needs a symbol nobody provides fails dlopen."""
    lib_path = tmp_path / "bf.so"
    source = tmp_path / "t.tile"
    source.write_text(BF16_MIN)
    assert main([str(source), "--arch", arch, "-o", str(lib_path), "--no-cache"]) == 0
    ctypes.CDLL(str(lib_path))    # ctypes binds every symbol at once (RTLD_NOW)
    if arch == "x86-64-v4" and not has_avx512():
        return
    x = np.random.default_rng(4).standard_normal((5, 9)).astype(ml_dtypes.bfloat16)
    got = tilec.load(str(lib_path)).rows(x, 0.25)
    want = run(compile_source(BF16_MIN, "t.tile"), "rows", x, 0.25)
    assert_close(got, want, "bfloat16")


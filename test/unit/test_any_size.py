"""Every valid program compiles and agrees with the reference at any size (issue 16): the
reproducers found by random programs, each on ``cpu``, ``cpu -O0`` and ``ascend-sim``."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from conftest import has_avx512

import tilec
from tilec.cli import main
from tilec.frontend import compile_source
from tilec.harness.numerics import assert_close
from tilec.dims import Dim
from tilec.frontend import Options
from tilec.harness.reference import find_function, run
from tilec.mlir import ir
from tilec.pipeline import parse_pipeline, run_pipeline
from tilec.tiling.tiler import TileParams

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


def positive(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Inputs of a numerically safe domain for long sums: no cancellation, so float32
    accumulation stays within the contract's rtol whatever the order."""
    return np.random.default_rng(seed).uniform(0.5, 1.5, shape).astype(np.float32)


@pytest.mark.parametrize("target,opt", CONFIGS)
def test_a_column_sum_compiles_at_any_fixed_size(target: str, opt: int) -> None:
    x = positive((4096, 4096), 1)
    agrees(COLSUM, "colsum", [x], target, opt, {"n": 4096, "d": 4096})


@pytest.mark.parametrize("target,opt", CONFIGS)
def test_a_column_sum_agrees_with_symbolic_sizes(target: str, opt: int) -> None:
    x = positive((1000, 77), 2)
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



TEMPLATED_COLSUM = """
#pragma shape_template(n, [4096])
#pragma shape_template(d, [4096])
func colsum(x: Tensor<float32>[n, d]) -> Tensor<float32>[d] {
  return reduce_sum(x, axes=[0], keepdims=false);
}
"""
# the slice along x's axis 1 keeps the grid off the output's leading axis: one row is the
# whole 2048 x 2047 output, with y broadcast over it
TRANSPOSED_SLICE = """
func g(x: Tensor<float32>[2048, 2048], y: Tensor<float32>[1, 2048]) -> Tensor<float32>[2047, 2048] {
  return transpose(x[:, 1:2048], [1, 0]) + y;
}
"""


@pytest.mark.parametrize("target,opt", CONFIGS)
def test_a_templated_column_sum_compiles(target: str, opt: int) -> None:
    agrees(TEMPLATED_COLSUM, "colsum", [positive((4096, 4096), 5)], target, opt)


@pytest.mark.parametrize("target,opt", CONFIGS)
def test_a_broadcast_over_a_transposed_slice_compiles(target: str, opt: int) -> None:
    agrees(TRANSPOSED_SLICE, "g", [positive((2048, 2048), 6), positive((1, 2048), 7)],
           target, opt)


def test_the_tile_parameters_read_back_from_the_kernel_attribute() -> None:
    module = compile_source(COLSUM, "t.tile", Options(defines={"n": 4096, "d": 4096}))
    with module.context:
        run_pipeline(module, parse_pipeline("tile-kernel{all=true target=ascend}"))
        fn = find_function(module, "colsum")
        params = TileParams.of(ir.DictAttr(fn.attributes["tile.kernel"]))
    assert params == TileParams("rows", (), Dim.const(2 * 4096 * 4096 * 4 + 3 * 4096 * 4),
                                Dim.const(0), 1, True)


TRANSPOSES = """
func t32(x: Tensor<float32>[n, m]) -> Tensor<float32>[m, n] {
  return transpose(x, [1, 0]);
}
func t16(x: Tensor<float16>[n, m]) -> Tensor<float16>[m, n] {
  return transpose(x, [1, 0]) * 2.0;
}
func t3(x: Tensor<float32>[b, n, m]) -> Tensor<float32>[b, m, n] {
  return transpose(x, [0, 2, 1]);
}
func h(x: Tensor<float16>[n, m]) -> Tensor<float16>[m, n] {
  return transpose(x, [1, 0]);
}
"""


@pytest.mark.parametrize("target,opt", CONFIGS)
@pytest.mark.parametrize("shape", [(1, 1), (1, 70), (70, 1), (17, 33), (300, 129), (64, 1000),
                                   (9, 1030), (520, 23)])
def test_transposes_walked_in_blocks_are_exact(target: str, opt: int, shape) -> None:
    """The CPU walks t16 in 32 x 128 blocks, t32 and t3 in 1024 x 32 ones of 8 x 8 squares
    (the 3-D one in runs of its grid's last dimension): every size around and across a
    square and a block, and a run shorter than a block."""
    rng = np.random.default_rng(sum(shape))
    lib = tilec.compile_string(TRANSPOSES, "t.tile", target=target, opt_level=opt)
    x = rng.standard_normal(shape).astype(np.float32)
    assert np.array_equal(lib.t32(x), x.T)
    h = x.astype(np.float16)
    assert np.array_equal(lib.t16(h), h.T * np.float16(2))
    assert np.array_equal(lib.h(h), h.T)
    x3 = rng.standard_normal((3, *shape)).astype(np.float32)
    assert np.array_equal(lib.t3(x3), x3.transpose(0, 2, 1))


@pytest.mark.parametrize("shape", [(40, 100), (300, 129), (33, 2050)])
def test_transposes_into_outputs_at_every_phase_of_a_line(shape) -> None:
    """A block's parts begin where the output's cache lines do: outputs that begin at every
    element of a line, and the elements around them untouched."""
    lib = tilec.compile_string(TRANSPOSES, "t.tile", target="cpu")
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    size = shape[0] * shape[1]
    for dtype, fn, lanes in ((np.float32, lib.t32, 16), (np.float16, lib.h, 32)):
        source = x.astype(dtype)
        for phase in range(lanes):
            space = np.full(size + 64, 7, dtype)
            start = phase + (-space.ctypes.data // space.itemsize) % lanes
            out = space[start:start + size].reshape(shape[::-1])
            fn(source, out=out)
            assert np.array_equal(out, source.T), (dtype, phase)
            assert (space[:start] == 7).all() and (space[start + size:] == 7).all()


@pytest.mark.parametrize("shape", [(4096, 4096), (4100, 2050)])
def test_big_transposes_stored_past_the_caches_are_exact(shape) -> None:
    """Outputs of 32 MiB or more whose rows are whole cache lines (4096 floats) are stored
    with non-temporal stores; rows of 4100 floats are not (each row's lines start elsewhere)."""
    lib = tilec.compile_string(TRANSPOSES, "t.tile", target="cpu")
    x = np.random.default_rng(9).standard_normal(shape).astype(np.float32)
    out = np.full(shape[::-1], np.nan, np.float32)
    lib.t32(x, out=out)
    assert np.array_equal(out, x.T)


SPLITS = """
func colsum(x: Tensor<float32>[n, d]) -> Tensor<float32>[d] {
  return reduce_sum(x, axes=[0], keepdims=false);
}
func colmax(x: Tensor<float32>[n, d]) -> Tensor<float32>[1, d] {
  return reduce_max(x, axes=[0]) - reduce_min(x, axes=[0, 1]);
}
func colmin(x: Tensor<float16>[n, d]) -> Tensor<float16>[1, d] {
  return reduce_min(x, axes=[0]);
}
func scaled_mean(x: Tensor<float32>[n, b, d], y: Tensor<float32>[n, b, d]) -> Tensor<float32>[1, 1, d] {
  return exp(reduce_mean(x * y, axes=[0, 1], keepdims=true)) + 1.0;
}
func total(x: Tensor<float32>[n]) -> float32 {
  return reduce_sum(x, axes=[0], keepdims=false);
}
"""


@pytest.mark.parametrize("target,opt", CONFIGS)
@pytest.mark.parametrize("n", [1, 7, 127, 1000])
def test_reductions_split_across_tiles_agree(target: str, opt: int, n: int) -> None:
    """Reductions over a leading axis, which the CPU splits into tiles of at least 16 rows
    (at most 32 tiles): fewer rows than a tile, a short last tile, many tiles; with a
    prologue, an epilogue, keepdims, max/min, float16, a mean over two axes, a scalar."""
    x = positive((n, 33), n)
    agrees(SPLITS, "colsum", [x], target, opt)
    agrees(SPLITS, "colmax", [x], target, opt)
    agrees(SPLITS, "colmin", [x.astype(np.float16)], target, opt)
    agrees(SPLITS, "scaled_mean", [positive((n, 3, 5), 1), positive((n, 3, 5), 2)], target, opt)
    agrees(SPLITS, "total", [x[:, 0].copy()], target, opt)


REDUCTIONS = """
func colsum(x: Tensor<float32>[n, d]) -> Tensor<float32>[d] {
  return reduce_sum(x, axes=[0], keepdims=false);
}
func rowstats(x: Tensor<float32>[n, d]) -> (Tensor<float32>[n, 1], Tensor<float32>[n, d]) {
  return (reduce_var(x, axes=[-1]), softmax(x, axis=-1));
}
func total(x: Tensor<float32>[n, d]) -> float32 {
  return reduce_sum(x, axes=[0, 1], keepdims=false);
}
func tr(x: Tensor<float32>[n, d]) -> Tensor<float32>[d, n] {
  return transpose(x, [1, 0]);
}
func mean3(x: Tensor<float32>[n, d]) -> Tensor<float32>[1, 1] {
  return reduce_mean(x * x, axes=[0, 1]) * 2.0;
}
"""
_RUN_WITH_THREADS = """
import sys, numpy as np, tilec
lib = tilec.load(sys.argv[1])
x = np.random.default_rng(8).standard_normal((2048, 1537)).astype(np.float32)
var, soft = lib.rowstats(x)
np.savez(sys.argv[2], colsum=lib.colsum(x), var=var, soft=soft, total=lib.total(x), tr=lib.tr(x),
         mean3=lib.mean3(x))
"""


def test_one_thread_and_all_threads_give_identical_bits(tmp_path) -> None:
    """Reductions over leading and trailing axes, and a blocked transpose: every element is
    computed by one row of the grid in a fixed order, whichever thread runs it; a reduction
    over the leading axis in a fixed number of tiles, whose partial results are combined in
    tile order."""
    source = tmp_path / "r.tile"
    source.write_text(REDUCTIONS)
    lib = tmp_path / "r.so"
    assert main([str(source), "-o", str(lib), "--no-cache"]) == 0
    results = {}
    for threads in ("1", "4"):
        out = tmp_path / f"{threads}.npz"
        env = {**os.environ, "TILEC_NUM_THREADS": threads}
        subprocess.run([sys.executable, "-c", _RUN_WITH_THREADS, str(lib), str(out)],
                       env=env, check=True)
        results[threads] = np.load(out)
    for name in ("colsum", "var", "soft", "total", "tr", "mean3"):
        assert results["1"][name].tobytes() == results["4"][name].tobytes(), name

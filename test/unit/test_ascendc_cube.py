"""GEMM on the Cube (``--target ascend-sim``): half and bfloat16 matmuls become mixed kernels
whose AIC runs GM -> L1 -> L0A/L0B -> Mmad -> Fixpipe and whose AIVs apply the epilogue, checked
by the CPU twin's strict mode; they match NumPy at awkward sizes (several M, N and K tiles and
their tails), batched, with a transposed ([N, K]) weight read in place and with a weight
broadcast over the batch; the generated CMake project still builds with the fake CANN's
bisheng (test_cmake.py runs it); a Llama MLP's three matmuls run on the Cube."""
from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tilec
from tilec.cli import main
from tilec.frontend import compile_source
from tilec.harness.numerics import assert_close
from tilec.harness.reference import allowed

SOURCE = """
func plain(x: Tensor<f16>[m, k], w: Tensor<f16>[k, n], b: Tensor<f16>[n]) -> Tensor<f16>[m, n] {
  return relu(x @ w + b);
}
func batched(x: Tensor<bf16>[b, m, k], w: Tensor<bf16>[b, k, n]) -> Tensor<bf16>[b, m, n] {
  return x @ w;
}
func shared(x: Tensor<f16>[b, m, k], w: Tensor<f16>[k, n]) -> Tensor<f16>[b, m, n] {
  return x @ w;
}
func linear(x: Tensor<bf16>[m, k], w: Tensor<bf16>[n, k]) -> Tensor<bf16>[m, n] {
  return x @ transpose(w, perm=[1, 0]) * 0.5;
}
func llama_mlp(x: Tensor<f16>[tokens, 256], wg: Tensor<f16>[512, 256],
               wu: Tensor<f16>[512, 256], wd: Tensor<f16>[256, 512]) -> Tensor<f16>[tokens, 256] {
  let g = x @ transpose(wg, perm=[1, 0]);
  let u = x @ transpose(wu, perm=[1, 0]);
  return (silu(g) * u) @ transpose(wd, perm=[1, 0]);
}
func linear32(x: Tensor<f32>[m, k], w: Tensor<f32>[n, k], b: Tensor<f32>[n]) -> Tensor<f32>[m, n] {
  return x @ transpose(w, perm=[1, 0]) + b;
}
func shared32(x: Tensor<f32>[b, m, k], w: Tensor<f32>[k, n]) -> Tensor<f32>[b, m, n] {
  return x @ w;
}
func generic32(x: Tensor<f32>[..., k], w: Tensor<f32>[n, k]) -> Tensor<f32>[..., n] {
  return x @ transpose(w, perm=[1, 0]);
}
"""

# (m, k, n): one element; tails of every tile (M 128, N 256, K 64); two M tiles, two N tiles
# and four K blocks with tails
SIZES = [(1, 1, 1), (7, 127, 5), (130, 200, 300)]


@pytest.fixture(scope="module")
def lib():
    return tilec.compile_string(SOURCE, "gemm.tile", target="ascend-sim")


def _random(shape, dtype, rng):
    return rng.uniform(-1, 1, size=shape).astype(dtype)


def _close(got, want, dtype) -> None:
    """One rounding of the float product to the result type, and one of the epilogue."""
    eps = 2.0 ** -10 if dtype == np.float16 else 2.0 ** -7
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=4 * eps,
                               atol=4 * eps * max(1.0, float(np.abs(want).max())))


def test_every_matmul_runs_on_the_cube(tmp_path: Path) -> None:
    source = tmp_path / "gemm.tile"
    source.write_text(SOURCE)
    out = tmp_path / "gemm.asc"
    assert main([str(source), "--target", "ascend-sim", "--emit", "ascendc", "-o", str(out)]) == 0
    text = out.read_text()
    for name in ("plain", "batched", "shared", "linear"):
        assert f"class tilec_{name}__k0_cube {{" in text
        assert f"tilec_{name}__k1" not in text    # no copy kernel for the transposed weight
    # gate and up: a kernel each (the product of one is the other's epilogue operand), down;
    # float32 with its [n, k] weight read in place
    assert text.count("Mmad(c, a2, b2, mm);") == 4 + 3 + 1
    assert "class tilec_linear32__k0_cube {" in text
    # float32 B stored [k, n] needs LoadData's transpose (2-byte types only): the vector
    # unit, reading the broadcast weight in place; a '...' shape has no Cube plan either
    kernel = text[text.index("shared32__k0: grid"):]
    assert "on the vector unit" in kernel[:kernel.index('extern "C"')]
    assert "shared32__k1" not in text
    assert "generic32__k1: grid" in text and "class tilec_generic32__k1_cube" not in text


@pytest.mark.parametrize("m, k, n", SIZES)
def test_plain_gemm_with_bias_and_relu(lib, m, k, n) -> None:
    rng = np.random.default_rng(m + k + n)
    x, w, b = (_random(s, np.float16, rng) for s in ((m, k), (k, n), (n,)))
    c = (x.astype(np.float64) @ w.astype(np.float64)).astype(np.float16)
    want = np.maximum(c.astype(np.float64) + b, 0)
    _close(lib.plain(x, w, b), want, np.float16)


@pytest.mark.parametrize("m, k, n", SIZES + [(1, 40, 3)])
def test_float32_linear_on_the_cube_and_views_on_the_vector_unit(lib, m, k, n) -> None:
    """Mmad takes float x float on Atlas A2 (Mmad page, table 6): fractals of 16 x 8; K
    blocks of 32 keep L0B's double buffer within 64 KiB.  Against the reference within the
    float32 contract."""
    rng = np.random.default_rng(m * k + n)
    x, w, b = (_random(s, np.float32, rng) for s in ((m, k), (n, k), (n,)))
    x3, w2 = _random((2, m, k), np.float32, rng), _random((k, n), np.float32, rng)
    for name, args in (("linear32", (x, w, b)), ("shared32", (x3, w2)), ("generic32", (x3, w))):
        (want,), (allowance,) = allowed(compile_source(SOURCE, "gemm.tile"), name, *args)
        assert_close(getattr(lib, name)(*args), want, "float32", allowance)


def test_one_row_is_multiplied_as_sixteen_not_as_gemv(lib) -> None:
    """m = 1 with K beyond one fractal: Mmad with M = 1 would be GEMV, reading L0A as ND
    (Mmad page, constraints), not the ZZ fractals LoadData wrote; the AIC multiplies the
    fractal's 16 rows and writes out the one."""
    rng = np.random.default_rng(1)
    x, w, b = (_random(s, np.float16, rng) for s in ((1, 40), (40, 5), (5,)))
    c = (x.astype(np.float64) @ w.astype(np.float64)).astype(np.float16)
    _close(lib.plain(x, w, b), np.maximum(c.astype(np.float64) + b, 0), np.float16)


@pytest.mark.parametrize("m, k, n", [(3, 65600, 2), (2, 5, 65600)])
def test_k_or_n_beyond_one_nd2nz_copy(lib, m, k, n) -> None:
    """K or N beyond the 65535 elements of ND2NZ's srcDValue: the rows go GM -> L1 one copy
    each (the launch refused them before); plain and with the [n, k] weight read in place."""
    rng = np.random.default_rng(k)
    x, w, b = (_random(s, np.float16, rng) for s in ((m, k), (k, n), (n,)))
    c = (x.astype(np.float64) @ w.astype(np.float64)).astype(np.float16)
    _close(lib.plain(x, w, b), np.maximum(c.astype(np.float64) + b, 0), np.float16)
    x16, w16 = x.astype(ml_dtypes.bfloat16), np.ascontiguousarray(w.T).astype(ml_dtypes.bfloat16)
    want = 0.5 * (x16.astype(np.float64) @ w16.astype(np.float64).T)
    _close(lib.linear(x16, w16), want, ml_dtypes.bfloat16)


@pytest.mark.parametrize("m, k, n", SIZES)
def test_batched_bf16_gemm(lib, m, k, n) -> None:
    rng = np.random.default_rng(k)
    x = _random((3, m, k), ml_dtypes.bfloat16, rng)
    w = _random((3, k, n), ml_dtypes.bfloat16, rng)
    _close(lib.batched(x, w), x.astype(np.float64) @ w.astype(np.float64), ml_dtypes.bfloat16)


@pytest.mark.parametrize("m, k, n", SIZES)
def test_weight_broadcast_over_the_batch(lib, m, k, n) -> None:
    rng = np.random.default_rng(n)
    x, w = _random((2, m, k), np.float16, rng), _random((k, n), np.float16, rng)
    _close(lib.shared(x, w), x.astype(np.float64) @ w.astype(np.float64), np.float16)


@pytest.mark.parametrize("m, k, n", SIZES)
def test_transposed_weight_read_in_place(lib, m, k, n) -> None:
    rng = np.random.default_rng(m)
    x, w = _random((m, k), ml_dtypes.bfloat16, rng), _random((n, k), ml_dtypes.bfloat16, rng)
    want = (x.astype(np.float64) @ w.astype(np.float64).T)
    _close(lib.linear(x, w), 0.5 * want, ml_dtypes.bfloat16)


def test_llama_mlp_on_the_cube(lib) -> None:
    """Three matmuls (hidden 256, intermediate 512) on the Cube: gate, then up with SiLU and the
    product as the AIVs' epilogue, then down, whose A (the intermediate, kept in float between
    kernels) the AIVs split into half hi + lo parts for the AIC: the result keeps A's float
    precision (rounding A to half once fails the contract's allowance)."""
    rng = np.random.default_rng(3)
    x = _random((37, 256), np.float16, rng)
    wg, wu, wd = (_random(s, np.float16, rng) for s in ((512, 256), (512, 256), (256, 512)))
    (want,), (allowance,) = allowed(compile_source(SOURCE, "gemm.tile"), "llama_mlp", x, wg, wu,
                                    wd)
    assert_close(lib.llama_mlp(x, wg, wu, wd), want, "float16", allowance)   # verify's check

"""The built-ins of language 1.1 (iota, inf, dim, erf, round, argmax/argmin) on the ``cpu``
target at -O0 and -O2 and on ``ascend-sim``, against the reference interpreter and against
NumPy written here independently of tilec, at awkward sizes."""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest

import tilec
from tilec.frontend import compile_source
from tilec.harness.numerics import assert_close
from tilec.harness.reference import run

SOURCE = """
func causal(scores: Tensor<f32>[s, t]) -> Tensor<f32>[s, t] {
  let mask = iota([s, t], axis=1) <= iota([s, t], axis=0, start=t - s);
  return softmax(where(mask, scores * rsqrt(cast(dim(t), float32)), -inf), axis=-1);
}

func clamp_low(x: Tensor<f32>[n], low: float32 = -inf) -> (Tensor<f32>[n], Tensor<f32>[n]) {
  return (max(x, low), exp(x * 0.0 - inf) + x / inf);
}

func indices(x: Tensor<f32>[r, n]) -> (Tensor<i32>[r, 1], Tensor<i32>[r], Tensor<i32>[n]) {
  return (argmax(x, axis=-1), argmin(x, axis=1, keepdims=false),
          argmax(x, axis=0, keepdims=false));
}

func rounding(x: Tensor<f32>[n]) -> (Tensor<f32>[n], Tensor<f32>[n]) {
  return (erf(x), round(x));
}

func halves(x: Tensor<f16>[n]) -> (Tensor<f16>[n], Tensor<i32>[1]) {
  return (round(erf(x) * 8.0) + exp(x * 0.0 - inf), argmax(max(x, -inf), axis=0));
}

func moves(x: Tensor<f32>[s, t])
    -> (Tensor<i32>[t, s], Tensor<i32>[s, t], Tensor<i32>[t], Tensor<f32>[s, t]) {
  let a = transpose(iota([s, t], axis=1, start=2), perm=[1, 0]);
  let b = iota([1, t], axis=0, start=5) + iota([s, 1], axis=0) * 100;
  let c = iota([t + 1], axis=0, start=-1)[1:t + 1];
  return (a, b, c, x * cast(iota([s, 1], axis=0), float32));
}

func generic(x: Tensor<f32>[..., n]) -> (Tensor<i32>[..., 1], Tensor<f32>[..., n]) {
  return (argmax(x, axis=-1), x + cast(iota([n], axis=0), float32));
}

func two_axes(x: Tensor<f16>[r, n]) -> (Tensor<i32>[r, 1], Tensor<i32>[1, n]) {
  let z = exp(x * 1.37) + reduce_sum(x, axes=[0]);
  return (argmax(z, axis=-1), argmin(z, axis=0));
}

func scale(x: Tensor<f32>[n], y: Tensor<f32>[k]) -> Tensor<f32>[n] {
  return x * cast(dim(k - 1), float32);
}

func alone(x: Tensor<f32>[n]) -> (Tensor<i32>[n], Tensor<f32>[1]) {
  return (iota([n], axis=0) + dim(n), reduce_sum(cast(iota([n], axis=0), float32) * x, axes=[0]));
}
"""

CONFIGS = [("cpu", 0), ("cpu", 2), ("ascend-sim", 2)]
SIZES = [1, 7, 127, 1000]


@functools.cache
def library(target: str, opt_level: int):
    return tilec.compile_string(SOURCE, "indices_test.tile", target=target,
                                opt_level=opt_level)


@functools.cache
def reference_module():
    return compile_source(SOURCE, "indices_test.tile")


def results(target: str, opt_level: int, name: str, *args):
    got = getattr(library(target, opt_level), name)(*args)
    want = run(reference_module(), name, *args)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    return got, want


def masked_softmax(scores: np.ndarray) -> np.ndarray:
    """torch.softmax of the causal mask, written with NumPy (queries the last s of t)."""
    s, t = scores.shape
    keys = np.arange(t)[None, :]
    queries = np.arange(s)[:, None] + (t - s)
    x = np.where(keys <= queries, scores.astype(np.float64) / math.sqrt(t), -np.inf)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("target, opt_level", CONFIGS)
@pytest.mark.parametrize("s, t", [(1, 1), (7, 7), (7, 127), (127, 1000), (9, 7)])
def test_causal_softmax(target: str, opt_level: int, s: int, t: int) -> None:
    scores = np.random.default_rng([s, t]).uniform(-4, 4, (s, t)).astype(np.float32)
    (got,), (want,) = results(target, opt_level, "causal", scores)
    assert_close(want, masked_softmax(scores), "float32")
    assert_close(got, want, "float32")
    masked = max(s - t, 0)      # the first s - t queries see no key: NaN, as torch gives
    assert np.isnan(got[:masked]).all() and not np.isnan(got[masked:]).any()
    assert np.allclose(got[masked:].sum(axis=-1), 1.0, atol=1e-5)


@pytest.mark.parametrize("target, opt_level", CONFIGS)
def test_inf_literal_and_default(target: str, opt_level: int) -> None:
    x = np.array([-np.inf, -3.0, 0.0, 2.5, np.inf, -1e30, 1e30], np.float32)
    (low, zeros), _ = results(target, opt_level, "clamp_low", x)
    assert np.array_equal(low, x)                     # max(x, -inf) is x
    assert np.array_equal(zeros[1:4], [0.0, 0.0, 0.0])  # exp(-inf) = 0, x / inf = 0
    assert np.isnan(zeros[[0, 4]]).all()              # inf / inf
    (clamped, _), _ = results(target, opt_level, "clamp_low", x, 0.0)
    assert np.array_equal(clamped, np.maximum(x, 0.0))


def _with_ties_and_nans(r: int, n: int) -> np.ndarray:
    rng = np.random.default_rng([r, n])
    x = rng.integers(-3, 4, (r, n)).astype(np.float32)   # many ties
    if r > 2 and n > 2:
        x[1, n // 2] = np.nan
        x[2, [0, n - 1]] = np.nan
        x[0, :] = 5.0
    return x


@pytest.mark.parametrize("target, opt_level", CONFIGS)
@pytest.mark.parametrize("r, n", [(1, 1), (7, 7), (3, 127), (5, 1000)])
def test_argmax_argmin_first_on_ties_nan_wins(target: str, opt_level: int, r: int,
                                              n: int) -> None:
    x = _with_ties_and_nans(r, n)
    got, want = results(target, opt_level, "indices", x)
    independent = (np.argmax(x, axis=-1)[:, None], np.argmin(x, axis=1), np.argmax(x, axis=0))
    for g, w, i in zip(got, want, independent):
        assert g.dtype == np.int32
        assert np.array_equal(w, i) and np.array_equal(g, i)
    if r > 2 and n > 2:
        assert got[0][1, 0] == n // 2 and got[1][2] == 0 and got[0][0, 0] == 0


@pytest.mark.parametrize("target, opt_level", CONFIGS)
@pytest.mark.parametrize("n", SIZES)
def test_erf_and_round(target: str, opt_level: int, n: int) -> None:
    x = np.random.default_rng(n).uniform(-5, 5, n).astype(np.float32)
    x[: min(n, 4)] = [2.5, -0.5, np.inf, -np.inf][: min(n, 4)]
    got, want = results(target, opt_level, "rounding", x)
    exact = np.array([math.erf(v) for v in x.astype(np.float64)])
    assert_close(want[0], exact, "float32")
    assert_close(got[0], exact, "float32")
    assert np.array_equal(got[1], np.rint(x)) and np.array_equal(want[1], np.rint(x))


@pytest.mark.parametrize("target, opt_level", CONFIGS)
def test_round_ties_to_even(target: str, opt_level: int) -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.49999976, 1e9 + 0.5], np.float32)
    (_, got), _ = results(target, opt_level, "rounding", x)
    assert got.tolist() == [0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 3.0, float(np.rint(x[-1]))]


@pytest.mark.parametrize("target, opt_level", CONFIGS)
@pytest.mark.parametrize("n", SIZES)
def test_float16(target: str, opt_level: int, n: int) -> None:
    x = np.random.default_rng(n).uniform(-2, 2, n).astype(np.float16)
    got, want = results(target, opt_level, "halves", x)
    assert_close(got[0], want[0], "float16")
    assert got[1].tolist() == want[1].tolist() == [int(np.argmax(x))]


@pytest.mark.parametrize("target, opt_level", CONFIGS)
@pytest.mark.parametrize("s, t", [(1, 1), (3, 7), (5, 130)])
def test_iota_through_data_movement(target: str, opt_level: int, s: int, t: int) -> None:
    """Transposed, broadcast from extent 1 along a grid axis, sliced, read along the grid,
    rank-generic, returned alone, reduced; argmax of a rank-generic operand."""
    x = np.random.default_rng([s, t]).uniform(-1, 1, (s, t)).astype(np.float32)
    rows, cols = np.arange(s)[:, None], np.arange(t)[None, :]
    moved, _ = results(target, opt_level, "moves", x)
    assert np.array_equal(moved[0], np.broadcast_to(cols + 2, (s, t)).T)
    assert np.array_equal(moved[1], np.broadcast_to(5 + rows * 100, (s, t)))
    assert np.array_equal(moved[2], np.arange(t))
    assert_close(moved[3], x.astype(np.float64) * rows, "float32")
    lead = x.reshape(1, s, t)
    (index, ramp), _ = results(target, opt_level, "generic", lead)
    assert np.array_equal(index, np.argmax(lead, axis=-1)[..., None])
    assert_close(ramp, lead.astype(np.float64) + cols, "float32")
    got, want = results(target, opt_level, "alone", x[0])
    assert np.array_equal(got[0], np.arange(t) + t)
    assert_close(got[1], want[1], "float32")
    assert_close(want[1], np.array([np.dot(np.arange(t), x[0].astype(np.float64))]), "float32")


def test_ptxas_accepts_the_builtins() -> None:
    """The PTX of every function above assembles (tilec runs the pinned ptxas for the cubin
    it embeds; a rejection is a TilecError)."""
    lib = tilec.compile_string(SOURCE, "indices_test.tile", target="ptx")
    assert {"causal", "indices", "rounding", "moves", "generic", "alone"} <= set(dir(lib))


@pytest.mark.parametrize("target, opt_level", CONFIGS)
def test_argmax_of_a_computed_value_along_two_axes(target: str, opt_level: int) -> None:
    """Both expansions share ``z != z`` after cse, a mask read by two groups (was an internal
    error, KeyError 'bool', before tile-fuse recomputed masks)."""
    x = np.random.default_rng(5).uniform(-2, 2, (64, 100)).astype(np.float16)
    z = np.exp(x.astype(np.float64) * 1.37) + x.astype(np.float64).sum(axis=0)
    got, want = results(target, opt_level, "two_axes", x)
    assert np.array_equal(got[0], np.argmax(z, axis=-1)[:, None])
    assert np.array_equal(got[1], np.argmin(z, axis=0)[None, :])
    assert np.array_equal(want[0], got[0]) and np.array_equal(want[1], got[1])


@pytest.mark.parametrize("target, opt_level", CONFIGS)
def test_dim_of_a_symbol_no_kernel_type_names(target: str, opt_level: int) -> None:
    x = np.arange(7, dtype=np.float32)
    (got,), _ = results(target, opt_level, "scale", x, np.zeros(12, np.float32))
    assert np.array_equal(got, x * 11)


OVERFLOW = """
func far(x: Tensor<f32>[n]) -> Tensor<i32>[n] {
  return iota([n], axis=0, start=2147483645);
}
func cube(x: Tensor<f32>[n]) -> int32 {
  return dim(n * n * n);
}
func half(x: Tensor<f32>[n]) -> int32 {
  return dim(n / 2);
}
"""


@pytest.mark.parametrize("target", ["cpu", "ascend-sim"])
def test_iota_and_dim_beyond_int32_raise_naming_the_argument(target: str) -> None:
    """iota's last value and dim's value are int32: beyond it, or a fraction (dim(n/2) of an
    odd n), the call raises naming the symbol's argument, as the reference does (the library
    wrapped around before)."""
    lib = tilec.compile_string(OVERFLOW, "o.tile", target=target)
    module = compile_source(OVERFLOW, "o.tile")
    for name, n, want in (("far", 3, 2147483645 + np.arange(3)), ("cube", 1290, 1290**3),
                          ("half", 6, 3)):
        x = np.zeros(n, np.float32)
        np.testing.assert_array_equal(getattr(lib, name)(x), want)
        np.testing.assert_array_equal(run(module, name, x), want)
    for name, n, message in (
            ("far", 4, r"o.tile:3:10: iota's last value 'n\+2147483644' \(n of 'x'\) is not an "
                       r"int32 \(n = 4\)"),
            ("cube", 1291, r"o.tile:6:14: dim 'n\*n\*n' \(n of 'x'\) is not an int32 "
                           r"\(n = 1291\)"),
            ("half", 7, r"o.tile:9:14: dim 'n/2' \(n of 'x'\) is not an int32 \(n = 7\)")):
        x = np.zeros(n, np.float32)
        with pytest.raises(RuntimeError, match=message):
            getattr(lib, name)(x)
        with pytest.raises(Exception, match=message):
            run(module, name, x)

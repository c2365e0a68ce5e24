"""The Ascend C compositions of ops without a single vector instruction (sigmoid, silu, tanh,
gelu's erf, gelu_tanh, sin, cos, pow, softmax), run on the CPU twin against float64 NumPy:
each within the float32 contract (|got - want| <= 1e-5 + 1e-4 |want|) over a wide range, and
within the bound its docstring in :mod:`tilec.codegen.ascendc.vector` states.

The twin's Exp, Ln and Reciprocal are the host's libm, correctly rounded: these bounds are
the compositions' own error, to which the NPU's approximations of those instructions add.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import tilec

SOURCE = """
func sigmoid_(x: Tensor<f32>[n]) -> Tensor<f32>[n] { return sigmoid(x); }
func silu_(x: Tensor<f32>[n]) -> Tensor<f32>[n] { return silu(x); }
func tanh_(x: Tensor<f32>[n]) -> Tensor<f32>[n] { return tanh(x); }
func gelu_(x: Tensor<f32>[n]) -> Tensor<f32>[n] { return gelu(x); }
func gelu_tanh_(x: Tensor<f32>[n]) -> Tensor<f32>[n] { return gelu_tanh(x); }
func erf_(x: Tensor<f32>[n]) -> Tensor<f32>[n] { return erf(x); }
func round_(x: Tensor<f32>[n]) -> Tensor<f32>[n] { return round(x); }
func sin_(x: Tensor<f32>[n]) -> Tensor<f32>[n] { return sin(x); }
func cos_(x: Tensor<f32>[n]) -> Tensor<f32>[n] { return cos(x); }
func pow_(a: Tensor<f32>[n], b: Tensor<f32>[n]) -> Tensor<f32>[n] { return pow(a, b); }
func softmax_(x: Tensor<f32>[r, n]) -> Tensor<f32>[r, n] { return softmax(x); }
"""

RNG = np.random.default_rng(2026)
WIDE = np.concatenate([np.linspace(-30, 30, 20001), RNG.standard_normal(4000) * 5,
                       [0.0, -0.0, 88, -88, 100, -100, 1e-6, -1e-6]]).astype(np.float32)
ERF = np.vectorize(math.erf)


@pytest.fixture(scope="module")
def lib() -> Any:
    return tilec.compile_string(SOURCE, "compositions.tile", target="ascend-sim")


def errors(got: np.ndarray, want: np.ndarray) -> float:
    """The largest absolute error; asserts the float32 contract on the way."""
    err = np.abs(got.astype(np.float64) - want)
    bound = 1e-5 + 1e-4 * np.abs(want)
    worst = int(np.argmax(err - bound))
    assert (err <= bound).all(), f"error {err[worst]:.3g} at element {worst} (want {want[worst]})"
    return float(err.max())


@pytest.mark.parametrize("name, reference, measured", [
    ("sigmoid_", lambda x: 1 / (1 + np.exp(-x)), 2e-7),
    ("silu_", lambda x: x / (1 + np.exp(-x)), 3e-6),
    ("tanh_", np.tanh, 3e-7),
    ("gelu_", lambda x: 0.5 * x * (1 + ERF(x / math.sqrt(2))), 1e-6),
    ("erf_", ERF, 3e-7),
    ("round_", np.rint, 0.0),
    ("gelu_tanh_", lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi)
                                                   * (x + 0.044715 * x ** 3))), 1e-6),
])
def test_activation_accuracy(lib: Any, name: str, reference: Any, measured: float) -> None:
    with np.errstate(over="ignore"):
        want = reference(WIDE.astype(np.float64))
    assert errors(getattr(lib, name)(WIDE), want) <= measured


@pytest.mark.parametrize("limit, measured", [(10.0, 2e-7), (1e4, 2e-7), (1e5, 2e-6)])
def test_sin_cos_accuracy_by_range(lib: Any, limit: float, measured: float) -> None:
    x = RNG.uniform(-limit, limit, 20000).astype(np.float32)
    assert errors(lib.sin_(x), np.sin(x.astype(np.float64))) <= measured
    assert errors(lib.cos_(x), np.cos(x.astype(np.float64))) <= measured


def test_pow_of_positive_bases_is_relatively_accurate(lib: Any) -> None:
    a = RNG.uniform(0.01, 10, 20000).astype(np.float32)
    b = RNG.uniform(-4, 4, 20000).astype(np.float32)
    want = np.power(a.astype(np.float64), b.astype(np.float64))
    got = lib.pow_(a, b).astype(np.float64)
    errors(got, want)
    assert (np.abs(got - want) <= 2e-6 * np.abs(want)).all()


def test_pow_follows_numpy_on_signs_and_special_cases(lib: Any) -> None:
    a = RNG.uniform(-5, 5, 5000).astype(np.float32)
    b = RNG.integers(-4, 5, 5000).astype(np.float32)
    errors(lib.pow_(a, b), np.power(a.astype(np.float64), b.astype(np.float64)))
    a = np.array([0, 0, 1, -1, -2, -2, 2, -8, 0, 1], np.float32)
    b = np.array([0, 2, 7.5, 3, 0.5, 2, 0, 1 / 3, -1, np.inf], np.float32)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(lib.pow_(a, b), np.power(a, b))


def test_softmax_accuracy(lib: Any) -> None:
    x = (RNG.standard_normal((64, 1000)) * 10).astype(np.float32)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    assert errors(lib.softmax_(x), e / e.sum(-1, keepdims=True)) <= 5e-7


def test_erf_is_relatively_accurate_near_zero_and_keeps_nan(lib: Any) -> None:
    x = np.array([1e-6, -1e-6, 1e-30, 0.0, -0.0, 0.01, np.inf, -np.inf, np.nan], np.float32)
    got = lib.erf_(x).astype(np.float64)
    want = ERF(x.astype(np.float64))
    finite = np.isfinite(want)
    assert (np.abs(got[finite] - want[finite]) <= 1e-6 * np.abs(want[finite])).all()
    assert np.isnan(got[-1]) and list(got[-3:-1]) == [1.0, -1.0]

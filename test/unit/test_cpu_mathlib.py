"""Accuracy of the CPU backend's float32 transcendentals (tilec.codegen.cpu.mathlib), compiled
and run like any kernel, against NumPy in float64 over the whole float32 range: inf, NaN,
signed zeros and subnormals must come out as NumPy has them, and finite results within the
stated number of float32 ulps (absolute error where the result is below ``floor``)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from cpu_harness import Built, build, call

erf = np.vectorize(math.erf)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -x))


# name -> (float64 reference, input range, max ulps, floor: results smaller in magnitude are
# checked against an absolute error of `floor` instead)
FUNCTIONS = {
    "exp": (np.exp, (-110.0, 90.0), 1.0, 0.0),
    "log": (np.log, (0.0, 3.4e38), 1.0, 0.0),
    "tanh": (np.tanh, (-20.0, 20.0), 1.5, 0.0),
    "sigmoid": (_sigmoid, (-110.0, 110.0), 2.5, 1e-37),
    "silu": (lambda x: x * _sigmoid(x), (-110.0, 110.0), 3.0, 1e-35),
    "sin": (np.sin, (-3.4e38, 3.4e38), 1.5, 0.0),
    "cos": (np.cos, (-3.4e38, 3.4e38), 1.5, 0.0),
    "rsqrt": (lambda x: 1 / np.sqrt(x), (0.0, 3.4e38), 1.5, 0.0),
    # 0.5 x (1 + erf(x / sqrt 2)) cancels for x < 0: its error is absolute, about ulp(x)
    "gelu": (lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2))), (-12.0, 12.0), 3.0, 5e-7),
    "gelu_tanh": (lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) *
                                                   (x + 0.044715 * x ** 3))),
                  (-12.0, 12.0), 3.0, 5e-7),
}
SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.2e-38, 3.4e38, -3.4e38]


def inputs(lo: float, hi: float) -> np.ndarray:
    """Evenly spaced and geometrically spaced points of [lo, hi], and the special values."""
    top = max(abs(lo), abs(hi))
    spread = np.geomspace(1e-38, top, 50000)
    x = np.concatenate([np.linspace(lo, hi, 100001), spread, -spread, SPECIALS])
    with np.errstate(over="ignore"):
        x = x.astype(np.float32)
    return x[np.isnan(x) | ((x >= lo) & (x <= hi)) | np.isinf(x)]


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Built:
    source = "\n".join(f"func f_{name}(x: Tensor<f32>[n]) -> Tensor<f32>[n] "
                       f"{{ return {name}(x); }}" for name in FUNCTIONS)
    source += ("\nfunc f_pow(a: Tensor<f32>[n], b: Tensor<f32>[n]) -> Tensor<f32>[n] "
               "{ return pow(a, b); }")
    return build(source, tmp_path_factory.mktemp("mathlib"))


def _run(library: Built, name: str, *args: np.ndarray) -> np.ndarray:
    out = np.zeros(args[0].shape, np.float32)
    call(library, f"f_{name}", list(args), [out])
    return out


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_accuracy(library, name):
    reference, (lo, hi), max_ulps, floor = FUNCTIONS[name]
    x = inputs(lo, hi)
    got = _run(library, name, x).astype(np.float64)
    with np.errstate(all="ignore"):
        exact = reference(x.astype(np.float64))
        rounded = exact.astype(np.float32)
    special = ~np.isfinite(rounded)
    assert np.array_equal(got[special], rounded[special], equal_nan=True), \
        f"{name} of {x[special]}: {got[special]}, want {rounded[special]}"
    finite = ~special
    error = np.abs(got[finite] - exact[finite])
    ulp = np.spacing(np.abs(rounded[finite])).astype(np.float64)
    allowed = np.maximum(max_ulps * ulp, floor)
    worst = np.argmax(error / allowed)
    assert error[worst] <= allowed[worst], (
        f"{name}({x[finite][worst]!r}) = {got[finite][worst]!r}, want {exact[finite][worst]!r} "
        f"({error[worst] / ulp[worst]:.2f} ulp)")


def test_pow(library):
    """NumPy's power: exact special cases, the sign from an odd exponent, NaN for a negative
    base and a fractional exponent; elsewhere exp(b log|a|) with a relative error that grows
    with |b log a| (the rounding of the product), about (2 + |b log a|) float32 ulps."""
    special = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, 2.5, np.inf,
                        -np.inf, np.nan, 1e-30, 1e30], np.float32)
    a, b = (v.ravel() for v in np.meshgrid(special, special))
    rng = np.random.default_rng(5)
    a = np.concatenate([a, np.exp(rng.uniform(-20, 20, 20000)),
                        -np.exp(rng.uniform(-5, 5, 2000))]).astype(np.float32)
    b = np.concatenate([b, rng.uniform(-4, 4, 20000),
                        rng.integers(-10, 10, 2000)]).astype(np.float32)
    got = _run(library, "pow", a, b).astype(np.float64)
    with np.errstate(all="ignore"):
        want = np.power(a.astype(np.float64), b.astype(np.float64))
        rounded = want.astype(np.float32).astype(np.float64)
    special = ~np.isfinite(rounded) | (rounded == 0)
    assert np.array_equal(got[special], rounded[special], equal_nan=True)
    finite = ~special
    rel = np.abs(got[finite] - want[finite]) / np.abs(want[finite])
    with np.errstate(all="ignore"):   # NaN where a special case gave a finite result
        exponent = np.nan_to_num(np.abs(b[finite] * np.log(np.abs(a[finite].astype(float)))))
    assert np.all(rel <= (2 + exponent) * 2.0 ** -23)

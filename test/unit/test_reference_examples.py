"""The reference on source programs compiled by the front end (the shared examples and the
run-time checks sema emits), against hand-written NumPy."""
import ml_dtypes
import numpy as np
import pytest
from conftest import SHARED_EXAMPLES

from tilec.frontend import compile_source
from tilec.harness.numerics import assert_close
from tilec.harness.reference import ReferenceError, run
from tilec.mlir import ir


def example(name: str) -> ir.Module:
    path = SHARED_EXAMPLES / f"{name}.tile"
    return compile_source(path.read_text(), path.name)


def f64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64)


@pytest.mark.parametrize("shape", [(1, 1, 2), (2, 7, 254)])
def test_swiglu(shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(0).uniform(-4, 4, shape).astype(np.float16)
    h = shape[-1] // 2
    a, g = f64(x)[..., :h], f64(x)[..., h:]
    got = run(example("swiglu"), "swiglu", x)
    assert got.dtype == np.float16
    assert_close(got, a * g / (1 + np.exp(-g)), "float16")


@pytest.mark.parametrize("shape", [(1,), (127,), (2, 3, 33)])
def test_layernorm(shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(1).uniform(-4, 4, shape).astype(np.float16)
    xf = f64(x)
    mean = xf.mean(-1, keepdims=True)
    var = ((xf - mean) ** 2).mean(-1, keepdims=True)
    assert_close(run(example("layernorm"), "layernorm", x), (xf - mean) / np.sqrt(var + 1e-5),
                 "float16")


def test_rmsnorm() -> None:
    rng = np.random.default_rng(2)
    x = rng.uniform(-4, 4, (7, 96)).astype(ml_dtypes.bfloat16)
    w = rng.uniform(-2, 2, 96).astype(ml_dtypes.bfloat16)
    mod = example("rmsnorm_templated")
    for kwargs, eps in [({}, 1e-6), ({"eps": 0.25}, 0.25)]:
        want = f64(x) / np.sqrt((f64(x) ** 2).mean(-1, keepdims=True) + eps) * f64(w)
        got = run(mod, "rmsnorm", x, w, **kwargs)
        assert got.dtype == ml_dtypes.bfloat16
        assert_close(got, want, "bfloat16")


def test_rope() -> None:
    rng = np.random.default_rng(3)
    tokens, heads, half = 5, 3, 17
    q = rng.uniform(-2, 2, (tokens, heads, 2 * half)).astype(np.float16)
    freqs = rng.uniform(-1, 1, (tokens, 2 * half)).astype(np.float32)
    cos = f64(freqs[:, :half].astype(np.float16))[:, None]
    sin = f64(freqs[:, half:].astype(np.float16))[:, None]
    q1, q2 = f64(q)[..., :half], f64(q)[..., half:]
    want = np.concatenate([q1 * cos - q2 * sin, q2 * cos + q1 * sin], axis=-1)
    assert_close(run(example("rope"), "rotary_emb", q, freqs), want, "float16")
    with pytest.raises(ReferenceError, match=r"^argument 'rope_freqs' dimension 1: expected "
                                             r"2\*half = 34 \(half = 17 from argument 'q' "
                                             r"dimension 2\), got 33$"):
        run(example("rope"), "rotary_emb", q, freqs[:, :-1])
    with pytest.raises(ReferenceError, match=r"^argument 'q' dimension 2 is 2\*half = 33: half "
                                             r"would be 33/2"):
        run(example("rope"), "rotary_emb", q[..., :-1], freqs[:, :-1])


CHECKED = """\
func head(x: Tensor<f32>[n], y: Tensor<f32>[m]) -> Tensor<f32>[m] {
  return x[0:m] + y;
}
func flat(x: Tensor<f32>[a, b], y: Tensor<f32>[c]) -> Tensor<f32>[c] {
  return reshape(x, [c]);
}
"""


def test_run_time_checks_of_sema_fail_at_their_source_location() -> None:
    mod = compile_source(CHECKED, "checked.tile")
    ones = lambda *shape: np.ones(shape, np.float32)  # noqa: E731
    np.testing.assert_array_equal(run(mod, "head", ones(5), ones(3)), np.full(3, 2.0))
    np.testing.assert_array_equal(run(mod, "flat", ones(2, 3), ones(6)), ones(6))
    with pytest.raises(ReferenceError, match=r"^checked\.tile:2:\d+: .*\(m = 3, n = 2\)$"):
        run(mod, "head", ones(2), ones(3))
    with pytest.raises(ReferenceError, match=r"^checked\.tile:5:\d+: .*\(a\*b = 6, c = 5\)$"):
        run(mod, "flat", ones(2, 3), ones(5))

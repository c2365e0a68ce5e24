"""tile-canonicalize folds only what is exact: the reference gives bit-identical results before
and after it, signed zeros, infinities and NaNs included."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from conftest import SHARED_EXAMPLES

import tilec.passes  # noqa: F401  (registers the passes)
from tilec.dialect.verify import verify_module
from tilec.frontend import compile_source
from tilec.harness.reference import run
from tilec.mlir import ir
from tilec.pipeline import parse_pipeline, run_pipeline

NOOPS = """\
func noops(x: Tensor<f32>[a, b], y: Tensor<f32>[a, b]) -> Tensor<f32>[a, b] {
  let z = x * 1.0 + -0.0;
  let w = reshape(z[:, :], [a, b]) / 1.0;
  return -(-w) + x * y - 0.0;
}
"""
KEPT = """\
func kept(x: Tensor<f32>[n]) -> Tensor<f32>[n] {
  return x + 0.0;
}
"""
SPECIALS = np.array([-0.0, 0.0, np.inf, -np.inf, np.nan, 1.5, -2.25, 3e38], np.float32)


def canonicalized(text: str) -> ir.Module:
    module = compile_source(text, "t.tile")
    with module.context:
        run_pipeline(module, parse_pipeline("tile-canonicalize"))
        verify_module(module)
    return module


def tile_ops(module: ir.Module) -> list[str]:
    body = module.body.operations[0].regions[0].blocks[0]
    return [op.operation.name for op in body.operations][:-1]


def assert_bitwise_equal(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_no_ops_fold_away_without_changing_a_bit() -> None:
    module = canonicalized(NOOPS)
    assert tile_ops(module) == ["tile.mul", "tile.add"]
    x = SPECIALS.reshape(2, 4)
    y = np.roll(SPECIALS, 3).reshape(2, 4)
    assert_bitwise_equal(run(module, "noops", x, y), run(compile_source(NOOPS, "t.tile"),
                                                         "noops", x, y))


def test_adding_positive_zero_stays_because_it_turns_negative_zero_positive() -> None:
    module = canonicalized(KEPT)
    assert tile_ops(module) == ["tile.constant", "tile.add"]
    assert np.signbit(run(compile_source(KEPT, "t.tile"), "kept", SPECIALS[:1])) == [False]


@pytest.mark.parametrize("name,args", [
    ("swiglu", lambda rng: (rng.normal(size=(2, 3, 8)).astype(np.float16),)),
    ("layernorm", lambda rng: (rng.normal(size=(2, 5, 7)).astype(np.float16),)),
    ("rope", lambda rng: (rng.normal(size=(3, 2, 8)).astype(np.float16),
                          rng.normal(size=(3, 8)).astype(np.float32))),
    ("rmsnorm_templated", lambda rng: (rng.normal(size=(3, 8)).astype(ml_dtypes.bfloat16),
                                       rng.normal(size=(8,)).astype(ml_dtypes.bfloat16))),
])
def test_examples_are_unchanged(name: str, args) -> None:
    text = (SHARED_EXAMPLES / f"{name}.tile").read_text()
    func_name = {"rope": "rotary_emb", "rmsnorm_templated": "rmsnorm"}.get(name, name)
    inputs = args(np.random.default_rng(0))
    assert_bitwise_equal(run(canonicalized(text), func_name, *inputs),
                         run(compile_source(text, "t.tile"), func_name, *inputs))

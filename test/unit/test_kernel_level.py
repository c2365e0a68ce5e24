"""Kernel-level IR (tile-kernel) keeps the meaning of the tensor level: the reference run on
the kernel body once per grid point equals the reference run on the tensor-level function."""
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tilec.passes  # noqa: F401  (registers the passes)
from tilec.frontend import compile_source
from tilec.harness.reference import run
from tilec.mlir import ir
from tilec.pipeline import parse_pipeline, run_pipeline

from conftest import OPS

RNG = np.random.default_rng(7)


def _rand(shape, dtype):
    return RNG.standard_normal(shape).astype(dtype)


def _kernelized(text: str, file: str):
    module = compile_source(text, file)
    with module.context:
        run_pipeline(module, parse_pipeline("tile-kernel{all=true}"))
    return module


def _grid(module, name: str) -> list[str]:
    for op in module.body.operations:
        if ir.StringAttr(op.attributes["sym_name"]).value == name:
            kernel = ir.DictAttr(op.attributes["tile.kernel"])
            return [ir.StringAttr(g).value for g in kernel["grid"]]
    raise KeyError(name)


def _same(text: str, file: str, name: str, *args) -> list[str]:
    want = run(compile_source(text, file), name, *args)
    kernel = _kernelized(text, file)
    got = run(kernel, name, *args)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)   # same ops, same order: bit-identical
    return _grid(kernel, name)


@pytest.mark.parametrize("shape", [(1, 1, 2), (2, 3, 10), (3, 1, 254)])
def test_swiglu(shape):
    grid = _same((OPS / "swiglu.tile").read_text(), "swiglu.tile", "swiglu",
                 _rand(shape, np.float16))
    assert grid == ["batch", "seq"]


@pytest.mark.parametrize("lead", [(), (1,), (3, 5), (2, 7, 3)])
def test_layernorm_rank_generic(lead):
    grid = _same((OPS / "layernorm.tile").read_text(), "layernorm.tile", "layernorm",
                 _rand(lead + (9,), np.float16))
    assert grid == ["..."]


def test_rope_broadcasts_the_table_over_heads():
    grid = _same((OPS / "rope.tile").read_text(), "rope.tile", "rotary_emb",
                 _rand((3, 4, 6), np.float16), _rand((3, 6), np.float32))
    assert grid == ["tokens", "heads"]


def test_rmsnorm():
    grid = _same((OPS / "rmsnorm_templated.tile").read_text(), "rms.tile", "rmsnorm",
                 _rand((5, 7), ml_dtypes.bfloat16), _rand((7,), ml_dtypes.bfloat16))
    assert grid == ["seq"]


PROGRAMS = {
    # a reduction over a leading axis cannot be split into rows along it
    "colsum": ("func f(x: Tensor<f32>[m, n]) -> Tensor<f32>[1, n] "
               "{ return reduce_sum(x, axes=[0]); }", [(5, 3)], [], None),
    "transpose": ("func f(x: Tensor<f32>[a, b, c]) -> Tensor<f32>[a, c, b] "
                  "{ return exp(transpose(x, perm=[0, 2, 1])); }", [(2, 3, 4)], ["a", "c"], None),
    "matmul_bias": ("func f(x: Tensor<f32>[m, k], w: Tensor<f32>[k, n], b: Tensor<f32>[n]) -> "
                    "Tensor<f32>[m, n] { return relu(x @ w + b); }",
                    [(5, 4), (4, 3), (3,)], ["m"], None),
    "softmax_rows": ("func f(x: Tensor<f32>[b, s, n]) -> Tensor<f32>[b, s, n] "
                     "{ return softmax(x, axis=-1); }", [(2, 3, 5)], ["b", "s"], None),
    "concat_rows": ("func f(x: Tensor<f32>[m, n], y: Tensor<f32>[m, k]) -> Tensor<f32>[m, n+k] "
                    "{ return concat(x, y * 2.0, axis=1); }", [(3, 2), (3, 4)], ["m"], None),
    "concat_leading": ("func f(x: Tensor<f32>[m, n], y: Tensor<f32>[k, n]) -> "
                       "Tensor<f32>[m+k, n] { return concat(x, y, axis=0); }",
                       [(3, 2), (1, 2)], [], None),
    "reshape_merge": ("func f(x: Tensor<f32>[a, b, c]) -> Tensor<f32>[a*b, c] "
                      "{ return reshape(x, [a*b, c]) + 1.0; }", [(2, 3, 4)], [], None),
    # the '...' grid entry spans every leading extent, also for an input that it does not index
    "bias_rank_generic": ("func f(x: Tensor<f32>[..., k, n], b: Tensor<f32>[k, n]) -> "
                          "Tensor<f32>[..., k, n] { return x + b; }",
                          [(3, 5, 4, 6), (4, 6)], ["...", "k"], None),
    "scalar_param": ("func f(x: Tensor<f32>[m, n], s: float32 = 0.5) -> Tensor<f32>[m, n] "
                     "{ return where(x > s, x, x * s); }", [(4, 6)], ["m"], None),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_programs(name):
    text, shapes, grid, alt = PROGRAMS[name]
    got = _same(text, f"{name}.tile", "f", *[_rand(s, np.float32) for s in shapes])
    assert got == (alt if alt is not None else grid)


FULL = "tile-shape-template,tile-canonicalize,cse,tile-fuse,tile-kernel{all=true}"


def _close(got, want):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        # fusion may rewrite x * sigmoid(x) to silu: equal up to float64 rounding
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64),
                                   rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name,args", [
    ("swiglu", [((2, 3, 10), np.float16)]),
    ("rotary_emb", [((3, 4, 6), np.float16), ((3, 6), np.float32)]),
    ("layernorm", [((2, 3, 7), np.float16)]),
    ("rmsnorm", [((5, 7), ml_dtypes.bfloat16), ((7,), ml_dtypes.bfloat16)]),
    ("rmsnorm", [((2048, 3), ml_dtypes.bfloat16), ((3,), ml_dtypes.bfloat16)]),
])
def test_fused_groups_become_kernels_called_by_the_host_function(name, args):
    file = {"swiglu": "swiglu", "rotary_emb": "rope", "layernorm": "layernorm",
            "rmsnorm": "rmsnorm_templated"}[name]
    text = (OPS / f"{file}.tile").read_text()
    values = [_rand(s, d) for s, d in args]
    module = compile_source(text, f"{file}.tile")
    with module.context:
        run_pipeline(module, parse_pipeline(FULL))
    host = [op for op in module.body.operations
            if ir.StringAttr(op.attributes["sym_name"]).value == name][0]
    calls = [op for op in host.regions[0].blocks[0].operations if op.operation.name == "func.call"]
    assert len(calls) == 1          # one fused group, one kernel
    _close(run(module, name, *values), run(compile_source(text, f"{file}.tile"), name, *values))


def test_dead_values_have_no_place_in_a_row_plan():
    # at -O0 nothing removes the dead transpose before the kernel level
    text = ("func f(x: Tensor<f32>[a, b]) -> Tensor<f32>[a, b] "
            "{ let unused = transpose(x, perm=[1, 0]); return exp(x); }")
    assert _same(text, "dead.tile", "f", _rand((3, 4), np.float32)) == ["a"]

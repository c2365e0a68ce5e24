"""The numerical contract of language.md 1.1 end to end: values stored between kernels keep
float32, a called function's ``return`` rounds in the reference as in the backends, and the
rounding allowance that ``tilec verify`` adds is tight enough to reject broken kernels."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tilec
from tilec.diagnostics import DiagnosticSink
from tilec.driver import CompileOptions, compile_text
from tilec.frontend import compile_source
from tilec.harness import reference
from tilec.harness.numerics import assert_close

# A bfloat16 chain whose first kernel stores two row reductions for the second; the
# column-wise normalize magnifies a bfloat16 rounding of them (24 + x has an ulp of 1/8)
# twenty-fold: stored as bfloat16 they put 3 of 5 rows 2-9% off.  Then 1000 float16 values
# concatenated, stored by one kernel (a column max reads them too) and reduced by another into
# a float32 variance: float16 storage is 1.5e-4 relative off.
STORED = """
func chain(x: Tensor<bf16>[rows, seq]) -> Tensor<bf16>[rows, seq] {
  let lo = reduce_min(x, axes=[-1]);
  let y = where(x > lo + 0.5, x, lo) - reduce_mean(x + 24.0, axes=[-1]);
  let m = reduce_mean(y, axes=[0]);
  return normalize(y, m, reduce_mean((y - m) * (y - m), axes=[0]));
}

func var_cat(a: Tensor<f16>[r, n], b: Tensor<f16>[r, n]) -> Tensor<f32>[r, 1] {
  let c = concat(a * 1.1 + 16.0, b * 1.1 + 16.0, axis=-1);
  return cast(reduce_var(c - reduce_max(c, axes=[0]), axes=[-1]), f32);
}
"""


@pytest.mark.parametrize("level", [2, 0])
@pytest.mark.parametrize("target", ["cpu", "ascend-sim"])
def test_values_between_kernels_keep_float32(target: str, level: int) -> None:
    lib = tilec.compile_string(STORED, "stored.tile", target, opt_level=level)
    module = compile_source(STORED, "stored.tile")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 127)).astype(ml_dtypes.bfloat16)      # seq = 127
    assert_close(lib.chain(x), reference.run(module, "chain", x), "bfloat16")
    a, b = (rng.standard_normal((3, 500)).astype(np.float16) for _ in range(2))
    assert_close(lib.var_cat(a, b), reference.run(module, "var_cat", a, b), "float32")


def test_the_chain_stores_its_reductions_as_float32() -> None:
    """The kernel IR: the buffer between the kernels is float32, the rows stay bfloat16."""
    ir_text = compile_text(STORED, "stored.tile", CompileOptions(emit="kernel"),
                           DiagnosticSink())
    assert "-> (tensor<?x1xf32, [\"rows\", \"1\"]>, tensor<?x1xf32, [\"rows\", \"1\"]>)" in ir_text
    assert "(tensor<?x1xf32, [\"rows\", \"1\"]>) -> tensor<?x1xbf16, [\"rows\", \"1\"]>" in ir_text


# A called function's bfloat16 return (8 + x/100: an ulp of 1/16 at 8) normalized by its
# caller: rounded at the return, the normalized values are a few steps of 8's ulp; unrounded
# they are those of x itself, up to 3.7 apart.
CALLED = """
func shift(x: Tensor<bf16>[r, n]) -> Tensor<bf16>[r, n] {
  return x * 0.01 + 8.0;
}
func caller(x: Tensor<bf16>[r, n]) -> Tensor<bf16>[r, n] {
  let y = shift(x);
  return normalize(y, reduce_mean(y, axes=[-1]), reduce_var(y, axes=[-1]));
}
"""


def test_the_reference_rounds_a_called_functions_return() -> None:
    x = np.random.default_rng(0).standard_normal((2, 64)).astype(ml_dtypes.bfloat16)
    want = reference.run(compile_source(CALLED, "called.tile"), "caller", x)
    y = (x.astype(np.float64) * 0.01 + 8.0).astype(ml_dtypes.bfloat16).astype(np.float64)
    rounded = (y - y.mean(-1, keepdims=True)) / np.sqrt(y.var(-1, keepdims=True) + 1e-5)
    assert_close(want, rounded, "bfloat16")
    for target in ("cpu", "ascend-sim"):
        lib = tilec.compile_string(CALLED, "called.tile", target)
        assert_close(lib.caller(x), want, "bfloat16")


def test_ptxas_accepts_kernels_that_pass_float32_buffers() -> None:
    lib = tilec.compile_string(STORED, "stored.tile", "ptx")
    assert {"chain", "var_cat"} <= set(lib.functions)

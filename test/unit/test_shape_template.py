"""tile-shape-template through the reference: a specialised module (dispatch table) computes
what the generic function does; the reference dispatches on exact bindings; the limits and
the semantic verifier (run after every pass here) reject what they must."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from conftest import SHARED_EXAMPLES

import tilec.passes  # noqa: F401  (registers the passes)
from tilec.diagnostics import TilecError
from tilec.dialect import make_context
from tilec.dialect.verify import verify_module
from tilec.frontend import Options, compile_source
from tilec.harness.reference import ReferenceError, run
from tilec.mlir import ir
from tilec.pipeline import parse_pipeline, run_pipeline

RMSNORM = (SHARED_EXAMPLES / "rmsnorm_templated.tile").read_text()

# two templates (4 variants) over a function with a scalar default and a symbolic slice
TWO_TEMPLATES = """\
#pragma shape_template(rows, [2, 3])
#pragma shape_template(half, [4, 8])
func mix(x: Tensor<f32>[rows, 2*half], s: float32 = 0.5) -> Tensor<f32>[rows, half] {
  return x[:, 0:half] * s + exp(x[:, half:2*half]);
}
"""


def compile_passes(text: str, pipeline: str, options: Options | None = None) -> ir.Module:
    """Front end, then ``pipeline``, verifying the IR first and after every pass."""
    module = compile_source(text, "t.tile", options)
    with module.context:
        verify_module(module)
        run_pipeline(module, parse_pipeline(pipeline), after_each=lambda _, m: verify_module(m))
    return module


def functions(module: ir.Module) -> list[str]:
    return [op.name.value for op in module.body.operations]


def rmsnorm_args(seq: int, hidden: int = 8) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seq)
    x = rng.normal(size=(seq, hidden)).astype(ml_dtypes.bfloat16)
    return x, rng.uniform(0.5, 2.0, hidden).astype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("no_generic", [False, True])
def test_rmsnorm_variant_computes_what_the_generic_does(no_generic: bool) -> None:
    generic = compile_source(RMSNORM, "t.tile")
    specialised = compile_passes(
        RMSNORM, f"tile-shape-template{{no-generic={str(no_generic).lower()}}},tile-canonicalize")
    variants = ["rmsnorm__seq_2048", "rmsnorm__seq_8192", "rmsnorm__seq_32768"]
    assert functions(specialised) == ([] if no_generic else ["rmsnorm"]) + variants
    x, w = rmsnorm_args(2048)
    np.testing.assert_array_equal(run(specialised, "rmsnorm", x, w, eps=1e-5),
                                  run(generic, "rmsnorm", x, w, eps=1e-5))


def test_rmsnorm_other_lengths_run_the_generic() -> None:
    generic = compile_source(RMSNORM, "t.tile")
    specialised = compile_passes(RMSNORM, "tile-shape-template,tile-canonicalize")
    x, w = rmsnorm_args(7)
    np.testing.assert_array_equal(run(specialised, "rmsnorm", x, w), run(generic, "rmsnorm", x, w))


def test_without_the_generic_other_lengths_are_refused() -> None:
    specialised = compile_passes(RMSNORM, "tile-shape-template{no-generic=true}")
    with pytest.raises(ReferenceError, match=r"'rmsnorm' has no variant for argument shapes "
                       r"\(7, 8\), \(8,\), \(\) \(variants: seq = 2048; seq = 8192; "
                       r"seq = 32768\) and no generic function"):
        run(specialised, "rmsnorm", *rmsnorm_args(7))


@pytest.mark.parametrize("rows,half", [(2, 4), (3, 8), (5, 4), (2, 3)])
def test_two_templates(rows: int, half: int) -> None:
    generic = compile_source(TWO_TEMPLATES, "t.tile")
    specialised = compile_passes(TWO_TEMPLATES, "tile-shape-template,tile-canonicalize")
    assert functions(specialised) == ["mix", "mix__rows_2__half_4", "mix__rows_2__half_8",
                                      "mix__rows_3__half_4", "mix__rows_3__half_8"]
    x = np.random.default_rng(rows * half).normal(size=(rows, 2 * half)).astype(np.float32)
    np.testing.assert_array_equal(run(specialised, "mix", x), run(generic, "mix", x))


def test_template_option_overrides_the_pragma_and_define_removes_it() -> None:
    overridden = compile_passes(RMSNORM, "tile-shape-template", Options(templates={"seq": [1, 2]}))
    assert functions(overridden) == ["rmsnorm", "rmsnorm__seq_1", "rmsnorm__seq_2"]
    fixed = compile_passes(RMSNORM, "tile-shape-template", Options(defines={"seq": 2048}))
    assert functions(fixed) == ["rmsnorm"]
    assert "tile.dispatch" not in fixed.operation.attributes


def test_the_pass_is_idempotent() -> None:
    once = compile_passes(TWO_TEMPLATES, "tile-shape-template")
    twice = compile_passes(TWO_TEMPLATES, "tile-shape-template,tile-shape-template")
    assert str(twice) == str(once)


def test_more_than_64_variants_are_refused_at_the_function() -> None:
    text = ("#pragma shape_template(a, [1, 2, 3, 4, 5, 6, 7, 8, 9])\n"
            "#pragma shape_template(b, [1, 2, 3, 4, 5, 6, 7, 8])\n"
            "func big(x: Tensor[a, b]) -> Tensor[a, b] { return x; }\n")
    with pytest.raises(TilecError, match=r"make 9 \(a\) x 8 \(b\) = 72 variants; at most 64") as e:
        compile_passes(text, "tile-shape-template")
    assert (e.value.span.file, e.value.span.line, e.value.span.col) == ("t.tile", 3, 6)


# ---------------------------------------------------------------------------------------------
# The reference's dispatch, on a hand-written table whose variants compute something else, so
# that the result tells which function ran.

DISPATCHED = """
module attributes {tile.dispatch = {f = {generic = "GENERIC", variants = [
    {binding = {n = 2 : i64}, fn = "f__n_2"}, {binding = {n = 3 : i64}, fn = "f__n_3"}]}}} {
  func.func @f(%x: tensor<?xf32, ["n"]> {tile.name = "x"}) -> tensor<?xf32, ["n"]>
      attributes {tile.symbols = ["n"]} {
    return %x : tensor<?xf32, ["n"]>
  }
  func.func @f__n_2(%x: tensor<2xf32> {tile.name = "x"}) -> tensor<2xf32>
      attributes {tile.symbols = ["n"]} {
    %0 = "tile.neg"(%x) : (tensor<2xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
  func.func @f__n_3(%x: tensor<3xf32> {tile.name = "x"}) -> tensor<3xf32>
      attributes {tile.symbols = ["n"]} {
    %0 = "tile.exp"(%x) : (tensor<3xf32>) -> tensor<3xf32>
    return %0 : tensor<3xf32>
  }
}
"""


@pytest.mark.parametrize("generic", ["f", ""])
def test_reference_runs_the_variant_of_the_exact_binding(generic: str) -> None:
    with make_context():
        module = ir.Module.parse(DISPATCHED.replace("GENERIC", generic))
    x2, x3 = np.array([1.0, 2.0], np.float32), np.array([0.0, 1.0, 2.0], np.float32)
    np.testing.assert_array_equal(run(module, "f", x2), -x2)
    np.testing.assert_array_equal(run(module, "f", x3), np.exp(x3.astype(np.float64))
                                  .astype(np.float32))
    x4 = np.ones(4, np.float32)
    if generic:
        np.testing.assert_array_equal(run(module, "f", x4), x4)
    else:
        with pytest.raises(ReferenceError, match=r"'f' has no variant for argument shapes \(4,\)"):
            run(module, "f", x4)
    np.testing.assert_array_equal(run(module, "f__n_3", x3 * 0), np.ones(3, np.float32))


# ---------------------------------------------------------------------------------------------
# The semantic verifier


def hand_written(body: str, params: str = '%x: tensor<?x?xf32, ["m", "n"]>',
                 result: str = 'tensor<?x?xf32, ["m", "n"]>') -> ir.Module:
    with make_context():
        return ir.Module.parse(f"func.func @f({params}) -> {result} {{\n{body}\n}}")


def verify_error(module: ir.Module) -> TilecError:
    with pytest.raises(TilecError) as e:
        verify_module(module)
    return e.value


def test_verify_accepts_every_example_after_every_pass() -> None:
    for path in sorted(SHARED_EXAMPLES.glob("*.tile")):
        compile_passes(path.read_text(), "tile-shape-template,tile-canonicalize")


BROKEN = {
    "elementwise shapes": (
        '%0 = "tile.add"(%x, %y) : (tensor<?x?xf32, ["m", "n"]>, tensor<?xf32, ["n"]>) '
        '-> tensor<?x?xf32, ["m", "n"]>',
        "'tile.add' has operands of shapes [m, n] and [n], which are neither equal nor rank 0"),
    "cmp result": (
        '%0 = "tile.cmp"(%x, %x) {predicate = "lt"} : (tensor<?x?xf32, ["m", "n"]>, '
        'tensor<?x?xf32, ["m", "n"]>) -> tensor<?x?xf32, ["m", "n"]>',
        "'tile.cmp' gives Tensor<float32>[m, n] where its operands make Tensor<bool>[m, n]"),
    "reduce keepdims": (
        '%0 = "tile.reduce"(%x) {axes = array<i64: -1>, keepdims = true, kind = "sum"} : '
        '(tensor<?x?xf32, ["m", "n"]>) -> tensor<?xf32, ["m"]>',
        "'tile.reduce' gives Tensor<float32>[m] where its operands make Tensor<float32>[m, 1]"),
    "slice extent": (
        '%0 = "tile.slice"(%x) {starts = ["0", "1"], ends = ["m", "n"]} : '
        '(tensor<?x?xf32, ["m", "n"]>) -> tensor<?x?xf32, ["m", "n"]>',
        "'tile.slice' gives Tensor<float32>[m, n] where its operands make "
        "Tensor<float32>[m, n-1]"),
    "matmul contraction": (
        '%0 = "tile.matmul"(%x, %x) : (tensor<?x?xf32, ["m", "n"]>, '
        'tensor<?x?xf32, ["m", "n"]>) -> tensor<?x?xf32, ["m", "n"]>',
        "'tile.matmul' contracts n with m"),
    "broadcast": (
        '%0 = "tile.broadcast"(%y) : (tensor<?xf32, ["n"]>) -> tensor<?x?xf32, ["m", "2*n"]>',
        "'tile.broadcast' cannot broadcast Tensor<float32>[n] to Tensor<float32>[m, 2*n]: "
        "dimension n is neither 2*n nor 1"),
    "concat axis": (
        '%0 = "tile.concat"(%x, %x) {axis = -1 : i64} : (tensor<?x?xf32, ["m", "n"]>, '
        'tensor<?x?xf32, ["m", "n"]>) -> tensor<?x?xf32, ["m", "n"]>',
        "'tile.concat' gives Tensor<float32>[m, n] where its operands make "
        "Tensor<float32>[m, 2*n]"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_verify_reports_a_broken_op_at_its_location(case: str) -> None:
    op, message = BROKEN[case]
    body = f"  {op}\n  return %x : tensor<?x?xf32, [\"m\", \"n\"]>"
    module = hand_written(body, params='%x: tensor<?x?xf32, ["m", "n"]>, %y: tensor<?xf32, ["n"]>')
    error = verify_error(module)
    assert error.message == message
    assert (error.span.line, error.span.col) == (2, 8)


def test_verify_refuses_a_dynamic_dimension_without_its_symbol() -> None:
    module = hand_written("  return %x : tensor<?xf32>", params="%x: tensor<?xf32>",
                          result="tensor<?xf32>")
    error = verify_error(module)
    assert error.message.startswith("'func.func' has a type that is no tile tensor")
    assert (error.span.line, error.span.col) == (1, 1)


def test_verify_reports_what_mlir_refuses_at_its_location() -> None:
    module = hand_written('  %0 = "tile.neg"(%x) : (tensor<?x?xf32, ["m", "n"]>) -> '
                          'tensor<?x?xf32, ["m", "n"]>\n  return %0 : tensor<?x?xf32, ["m", "n"]>')
    body = module.body.operations[0].regions[0].blocks[0]
    with module.context, ir.Location.unknown():
        body.operations[0].results[0].set_type(ir.Type.parse('tensor<?xf32, ["m"]>'))
    error = verify_error(module)
    assert error.message.startswith("type of return operand 0")
    assert (error.span.line, error.span.col) == (3, 3)


def test_a_variant_folds_the_symbol_in_dim_and_iota():
    """A variant at d = 4 computes dim(d) and an iota starting at d - n with d = 4: the
    variant's function names no symbol d any more (it was left in these two attributes, and
    the reference and the kernels failed on the variant's missing symbol)."""
    import tilec
    source = """
#pragma shape_template(d, [4])
func f(x: Tensor<f32>[n, d]) -> Tensor<f32>[n, d] {
  return x * cast(dim(d), f32) + cast(iota([n, d], axis=0, start=d - n), f32);
}
"""
    lib = tilec.compile_string(source, "dims.tile")
    module = compile_source(source, "dims.tile")
    with module.context:
        run_pipeline(module, parse_pipeline("tile-shape-template"))
    for n, d in ((3, 4), (5, 4), (3, 6)):
        x = np.arange(n * d, dtype=np.float32).reshape(n, d)
        want = x * d + (np.arange(n) + d - n)[:, None]
        np.testing.assert_array_equal(lib.f(x), want)
        np.testing.assert_array_equal(run(module, "f", x), want)

"""tile-fuse and tile-cache-hint on whole programs: how many groups each function becomes, and
the reference interpreter giving the same results on the fused module as on the unfused IR."""
from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest
from conftest import SHARED_EXAMPLES

import tilec
import tilec.passes  # noqa: F401  (registers the passes)
from tilec.diagnostics import DiagnosticSink
from tilec.dialect import make_context, ops, params_of, tensor_info
from tilec.frontend import compile_source
from tilec.harness.numerics import assert_close
from tilec.harness.reference import find_function, run
from tilec.mlir import ir
from tilec.passes import default_pipeline
from tilec.pipeline import parse_pipeline, run_pipeline

FUSION = "tile-fuse,tile-cache-hint"

# name -> (source, {function: number of groups})
PROGRAMS: dict[str, tuple[str, dict[str, int]]] = {
    "softmax": ("""
func softmax_scale(x: Tensor<f32>[n, m], s: float32) -> Tensor<f32>[n, m] {
  return softmax(x, axis=-1) * s;
}
func softmax_manual(x: Tensor<f32>[n, m]) -> Tensor<f32>[n, m] {
  let e = exp(x - reduce_max(x, axes=[-1]));
  return e / reduce_sum(e, axes=[-1]);
}
func softmax_generic(x: Tensor[...]) -> Tensor[...] {
  return softmax(x, axis=-1);
}
""", {"softmax_scale": 1, "softmax_manual": 1, "softmax_generic": 1}),
    "matmul": ("""
func mlp(x: Tensor<f32>[m, k], w: Tensor<f32>[k, n], b: Tensor<f32>[n]) -> Tensor<f32>[m, n] {
  return relu(x @ w + b);
}
func producer(x: Tensor[m, k], w: Tensor<f32>[k, n]) -> Tensor<f32>[m, n] {
  return relu(cast(x, f32) * 0.5) @ w;
}
func batched(a: Tensor<f32>[b, m, k], w: Tensor<f32>[b, k, n]) -> Tensor<f32>[b, m, n] {
  return gelu(a @ w);
}
func attention(q: Tensor<f32>[s, d], k: Tensor<f32>[d, s],
               v: Tensor<f32>[s, d]) -> Tensor<f32>[s, d] {
  return softmax(q @ k * 0.125, axis=-1) @ v;
}
""", {"mlp": 1, "producer": 2, "batched": 1, "attention": 3}),
    "rows": ("""
func independent(x: Tensor<f32>[a, b]) -> (Tensor<f32>[a, 1], Tensor<f32>[1, b]) {
  return (reduce_sum(x, axes=[-1]), reduce_sum(x, axes=[-2]));
}
func two_rows(x: Tensor<f32>[a, b]) -> Tensor<f32>[1, b] {
  let m = reduce_mean(x, axes=[-1]);
  return reduce_sum(x - m, axes=[-2]);
}
func stats(x: Tensor<f32>[a, b, c]) -> Tensor<f32>[a, 1, 1] {
  return reduce_var(x, axes=[-2, -1]) + reduce_min(x, axes=[-1, -2]);
}
func dropped(x: Tensor<f32>[a, b]) -> Tensor<f32>[a] {
  return exp(reduce_sum(x, axes=[-1], keepdims=false));
}
func heads(x: Tensor<f32>[t, 2*h]) -> Tensor<f32>[t, 2, h] {
  return softmax(reshape(x, [t, 2, h]), axis=-1);
}
func across_rows(x: Tensor<f32>[n, n]) -> Tensor<f32>[n, n] {
  return x * reduce_sum(x, axes=[-1], keepdims=false);
}
""", {"independent": 2, "two_rows": 2, "stats": 1, "dropped": 1, "heads": 1, "across_rows": 2}),
    "sharing": ("""
func recompute(x: Tensor[a, b]) -> (Tensor<f32>[a, 1], Tensor<f32>[1, b]) {
  let c = cast(x, f32) * 2.0;
  return (reduce_sum(c, axes=[-1]), reduce_max(c, axes=[-2]));
}
func materialise(x: Tensor[a, b], y: Tensor[a, b]) -> (Tensor<f32>[a, 1], Tensor<f32>[1, b]) {
  let c = cast(x, f32) * cast(y, f32);
  return (reduce_sum(c, axes=[-1]), reduce_max(c, axes=[-2]));
}
func reduced_twice(x: Tensor<f32>[a, b]) -> (Tensor<f32>[a, 1], Tensor<f32>[1, 1]) {
  let s = reduce_sum(x, axes=[-1]);
  return (exp(s), reduce_max(s, axes=[-2]));
}
func cycle(x: Tensor<f32>[n, n], w: Tensor<f32>[n, n]) -> Tensor<f32>[n, n] {
  let p = softmax(x, axis=-1);
  let m = (p * 2.0) @ w;
  return transpose(m, perm=[1, 0]) + p;
}
""", {"recompute": 2, "materialise": 2, "reduced_twice": 2, "cycle": 3}),
    "buffers": ("""
func reuse_dead(x: Tensor<f32>[n, m]) -> Tensor<f32>[n, m] {
  let a = softmax(x, axis=-2);
  let b = softmax(a, axis=-1);
  let c = softmax(b, axis=-2);
  return softmax(c, axis=-1);
}
func in_place(x: Tensor<f32>[n, m], w: Tensor<f32>[m, m]) -> Tensor<f32>[n, m] {
  let a = softmax(x, axis=-2);
  let b = softmax(x, axis=-1) + a;
  return b @ w;
}
func never_result(x: Tensor<f32>[n, m], w: Tensor<f32>[m, m])
    -> (Tensor<f32>[n, m], Tensor<f32>[n, m]) {
  let a = softmax(x, axis=-2);
  let c = softmax(softmax(a, axis=-1), axis=-2);
  return (a, c @ w);
}
""", {"reuse_dead": 4, "in_place": 3, "never_result": 4}),
    "elementwise": ("""
func movement(x: Tensor<f32>[n, m]) -> Tensor<f32>[m, 2*n] {
  return concat(transpose(exp(x), perm=[1, 0]), transpose(x, perm=[1, 0]) * 2.0, axis=-1);
}
func clip(x: Tensor<f32>[n], lo: float32) -> Tensor<f32>[n] {
  let below = x < lo;
  return where(below, lo, tanh(x));
}
func ints(a: Tensor<i32>[n], b: Tensor<i32>[n]) -> Tensor<i32>[n] {
  return max(a * b, a - b) + cast(cast(a, f32) * 0.5, i32);
}
func unary(x: Tensor<f32>[n]) -> Tensor<f32>[n] {
  let a = abs(x);
  return sqrt(a) + log(a + 1.0) + sin(x) * cos(x) + reciprocal(a + 3.0) - neg(relu(x))
    + silu(x) + gelu_tanh(x) + pow(a, 1.5) + min(x, 0.5) + rsqrt(a + 1.0) + sigmoid(x) * x;
}
func halves(x: Tensor[n, 2*h], y: Tensor[n, 2*h]) -> Tensor[n, h] {
  return x[:, 0:h] / (y[:, h:2*h] + 3.0) - x[:, h:2*h];
}
func two_shapes(x: Tensor<f32>[n, 2*h]) -> (Tensor<f32>[n, 2*h], Tensor<f32>[n, h]) {
  let e = exp(x);
  return (e, e[:, 0:h]);
}
func siblings(x: Tensor[n, 2*h]) -> (Tensor[n, h], Tensor<f32>[n, h]) {
  return (exp(x[:, 0:h]), cast(x[:, h:2*h], f32));
}
""", {"movement": 1, "clip": 1, "ints": 1, "unary": 1, "halves": 1, "two_shapes": 2,
      "siblings": 1}),
    "hints": ("""
#pragma cache_hint(w, L2)
func scale(x: Tensor<f32>[n, m], w: Tensor<f32>[m]) -> Tensor<f32>[n, m] {
  #pragma cache_hint(colmax, UB)
  let colmax = reduce_max(x, axes=[-2]);
  return softmax(x, axis=-1) * colmax * w;
}
""", {"scale": 2}),
}

EXAMPLES = {"swiglu": {"swiglu": 1}, "layernorm": {"layernorm": 1}, "rope": {"rotary_emb": 1},
            "rmsnorm_templated": {"rmsnorm": 1}}


def example(name: str) -> tuple[str, str]:
    path = SHARED_EXAMPLES / f"{name}.tile"
    return path.read_text(), path.name


def compiled(source: str, file: str = "test.tile") -> ir.Module:
    return compile_source(source, file)


def transformed(module: ir.Module, pipeline: str, sink: DiagnosticSink | None = None) -> ir.Module:
    """A copy of ``module`` after ``pipeline``; the module itself is left as it is."""
    copy = ir.Module.parse(module.operation.get_asm(enable_debug_info=True), module.context)
    with module.context:
        run_pipeline(copy, parse_pipeline(pipeline), sink or DiagnosticSink())
    return copy


def groups(module: ir.Module, function: str) -> list[ir.Operation]:
    body = find_function(module, function).regions[0].blocks[0]
    return [op.operation for op in body.operations if op.operation.name == "tile.fused"]


def function_names(module: ir.Module) -> list[str]:
    return [ir.StringAttr(op.attributes["sym_name"]).value for op in module.body.operations]


# ---------------------------------------------------------------------------------------------
# Arguments


def bindings(func_op) -> list[tuple[dict[str, int], tuple[int, ...]]]:
    """Symbol values (the anonymous ``tile.lead`` ones too) and '...' dims to run with: all 1,
    then distinct odd sizes."""
    attrs = func_op.attributes
    names = [ir.StringAttr(s).value for key in ("tile.symbols", "tile.lead") if key in attrs
             for s in attrs[key]]
    odd = dict(zip(names, (3, 5, 7, 9, 11, 13)))
    return [({s: 1 for s in names}, ()), (odd, (2, 3))]


def arguments(func_op, symbols: dict[str, int], lead: tuple[int, ...],
              rng: np.random.Generator) -> list:
    out = []
    for p in params_of(func_op):
        if p.scalar:
            out.append(float(rng.uniform(-1, 1)) if p.info.dtype != "int32" else 3)
            continue
        shape = tuple(int(d.evaluate(symbols)) for d in p.info.dims)
        shape = (lead + shape) if p.info.rank_generic else shape
        if p.info.dtype == "int32":
            out.append(rng.integers(-50, 50, shape).astype(np.int32))
        else:
            dtype = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16,
                     "float32": np.float32}[p.info.dtype]
            out.append(rng.uniform(-2, 2, shape).astype(dtype))
    return out


def results(module: ir.Module, function: str, args: list) -> list[np.ndarray]:
    got = run(module, function, *args)
    return list(got) if isinstance(got, tuple) else [got]


def assert_same_results(before: ir.Module, after: ir.Module, function: str,
                        exact: bool) -> None:
    func_op = find_function(before, function)
    for seed, (symbols, lead) in enumerate(bindings(func_op)):
        args = arguments(func_op, symbols, lead, np.random.default_rng(seed))
        want = results(before, function, args)
        got = results(after, function, args)
        for g, w, t in zip(got, want, func_op.type.results):
            if exact:
                np.testing.assert_array_equal(g.astype(np.float64), w.astype(np.float64))
            else:
                assert_close(g, w.astype(np.float64), tensor_info(t).dtype)


# ---------------------------------------------------------------------------------------------
# Programs


@pytest.mark.parametrize("name", PROGRAMS)
def test_programs_fuse_to_the_stated_groups_with_the_same_results(name: str) -> None:
    source, counts = PROGRAMS[name]
    before = compiled(source)
    after = transformed(before, FUSION)
    assert {f: len(groups(after, f)) for f in counts} == counts
    for function in counts:
        assert_same_results(before, after, function, exact=True)


@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_are_one_group_with_the_same_results(name: str) -> None:
    before = compiled(*example(name))
    after = transformed(before, FUSION)
    for function, count in EXAMPLES[name].items():
        assert len(groups(after, function)) == count
        assert_same_results(before, after, function, exact=True)


@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_through_the_default_pipeline(name: str) -> None:
    before = compiled(*example(name))
    after = transformed(before, default_pipeline(2))
    for function in function_names(after):
        assert len(groups(after, function)) == 1
    for function in EXAMPLES[name]:
        assert_same_results(before, after, function, exact=False)


def test_swiglu_reads_its_input_once() -> None:
    after = transformed(compiled(*example("swiglu")), FUSION)
    (group,) = groups(after, "swiglu")
    arg = find_function(after, "swiglu").regions[0].blocks[0].arguments[0]
    assert list(group.operands) == [arg]


# ---------------------------------------------------------------------------------------------
# Recompute versus materialise at the op budget


def chain(length: int) -> str:
    body = "cast(x, f32)"
    for _ in range(length - 1):
        body = f"exp({body})"
    return f"""
func f(x: Tensor[a, b]) -> (Tensor<f32>[a, 1], Tensor<f32>[1, b]) {{
  let c = {body};
  return (reduce_sum(c, axes=[-1]), reduce_max(c, axes=[-2]));
}}"""


@pytest.mark.parametrize("length,recomputed", [(8, True), (9, False)])
def test_a_chain_is_recomputed_up_to_eight_ops(length: int, recomputed: bool) -> None:
    before = compiled(chain(length))
    after = transformed(before, FUSION)
    first, second = groups(after, "f")
    arg = find_function(after, "f").regions[0].blocks[0].arguments[0]
    assert list(first.operands) == [arg]
    assert len(first.results) == (1 if recomputed else 2)
    assert list(second.operands) == ([arg] if recomputed else [first.results[0]])
    assert_same_results(before, after, "f", exact=True)


SHARED_MASK = """
func f(x: Tensor<f32>[r, n]) -> (Tensor<f32>[r, 1], Tensor<f32>[1, n]) {
  let z = x + reduce_sum(x, axes=[0]);
  let m = z > 0.0;
  return (reduce_sum(where(m, z, 0.0), axes=[-1]), reduce_sum(where(m, z, 1.0), axes=[0]));
}
"""


@pytest.mark.parametrize("target", ["cpu", "ascend-sim"])
def test_a_mask_read_by_two_groups_is_recomputed_in_each(target: str) -> None:
    """A mask whose cone (a reduction) is not cheap to recompute, read by two row
    reductions of different axes: each group recomputes the comparison from its materialised
    operand, since no kernel can store a mask (was an internal error: KeyError 'bool')."""
    before = compiled(SHARED_MASK)
    after = transformed(before, FUSION)
    results = [r.type for g in groups(after, "f") for r in g.results]
    assert results and all(tensor_info(t).dtype != "bool" for t in results)
    assert_same_results(before, after, "f", exact=True)
    lib = tilec.compile_string(SHARED_MASK, "mask.tile", target=target)
    x = np.random.default_rng(3).uniform(-1, 1, (5, 7)).astype(np.float32)
    for got, want in zip(lib.f(x), run(before, "f", x)):
        assert_close(got, want, "float32")


# ---------------------------------------------------------------------------------------------
# Operand segments of tile.fused


def test_fused_op_takes_inputs_and_results_of_several_types() -> None:
    with make_context(), ir.Location.unknown():
        f16, f32 = ir.F16Type.get(), ir.F32Type.get()
        vector, scalar = ir.RankedTensorType.get([4], f16), ir.RankedTensorType.get([], f32)
        module = ir.Module.parse(f"""
func.func @f(%a: {vector}, %s: {scalar}) -> ({vector}, {scalar}) {{
  return %a, %s : {vector}, {scalar}
}}""")
        body = module.body.operations[0].regions[0].blocks[0]
        ret = list(body.operations)[-1]
        with ir.InsertionPoint(ret):
            fused = ops.fused(list(body.arguments), [vector, scalar], ir.Location.unknown())
        block = ir.Block.create_at_start(fused.regions[0], [vector, scalar],
                                         [ir.Location.unknown()] * 2)
        with ir.InsertionPoint(block):
            ops.yield_(list(block.arguments), ir.Location.unknown())
        ret.operands[0], ret.operands[1] = fused.results[0], fused.results[1]
        assert module.operation.verify()
        assert list(fused.attributes["operandSegmentSizes"]) == [1, 1, 0, 0, 0, 0, 0, 0]


def test_type_runs() -> None:
    with make_context():
        a, b = ir.F16Type.get(), ir.F32Type.get()
        assert ops.type_runs([a, a, b, a]) == [2, 1, 1, 0, 0, 0, 0, 0]
        with pytest.raises(ValueError, match="9 runs"):
            ops.type_runs([a, b] * 4 + [a])


def test_a_group_never_has_more_input_types_than_segments() -> None:
    dtypes = ("f16", "bf16", "f32", "i32")
    parameters = [f"p{i}: Tensor<{dt}>[{shape}]" for i, (shape, dt)
                  in enumerate(itertools.product(("n", "1, n"), dtypes))]
    terms = " + ".join(f"cast(p{i}, f32)" for i in range(len(parameters)))
    source = f"""
func wide({", ".join(parameters)}, q: Tensor<f32>[m, n]) -> Tensor<f32>[m, n] {{
  return q + {terms};
}}"""
    before = compiled(source)
    after = transformed(before, FUSION)
    assert all(len({x.type for x in g.operands}) <= ops.TYPE_RUNS for g in groups(after, "wide"))
    assert len(groups(after, "wide")) == 2
    assert_same_results(before, after, "wide", exact=True)


# ---------------------------------------------------------------------------------------------
# Cache hints across fusion


def test_a_hint_kept_in_registers_warns_once_at_the_pragma() -> None:
    source = """func kept(x: Tensor<f32>[n]) -> Tensor<f32>[n] {
  let e = exp(x);
  #pragma cache_hint(e, L1)
  return e * 2.0;
}"""
    sink = DiagnosticSink()
    transformed(compiled(source, "kept.tile"), FUSION, sink)
    assert [(str(w.span), w.severity) for w in sink.warnings] == [("kept.tile:3:3", "warning")]


def test_hints_on_a_parameter_and_on_a_let_read_by_another_group() -> None:
    after = transformed(compiled(PROGRAMS["hints"][0]), FUSION)
    first, second = groups(after, "scale")
    hints = [ir.DictAttr(d) for d in second.attributes["tile.cache_hints"]]
    by_name = {ir.StringAttr(d["name"]).value: d for d in hints if "name" in d}
    assert set(by_name) == {"colmax", "w"}
    assert [ir.StringAttr(s).value for s in by_name["colmax"]["reused_over"]] == ["n"]
    assert [ir.StringAttr(s).value for s in by_name["w"]["resident"]] == ["m"]
    assert "tile.cache_hints" not in first.attributes

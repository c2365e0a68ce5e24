"""Fused attention on the Ascend Cube (issue 20, on ascend-sim): tile-attention fuses attention
with half/bfloat16 q, k and v into one mixed kernel whose AIC computes both products (Mmad)
and whose AIVs run the element-wise chain and the online softmax, handing blocks over through
GM with cross-core flags (the twin's strict mode checks every hand-off).  Checked against the
reference: causal grouped-query, non-causal, masked by an input's comparison (a row that sees
no key is NaN), additive bias, decode, at awkward sizes (s, t in 1, 17, 255; d 64, 128);
float32 attention, and a float32 result of half attention, keep the unfused kernels; a value
row beyond the accumulator is refused at launch with the reason."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tilec
from tilec.diagnostics import DiagnosticSink
from test_attention import _plan, reference
from tilec.harness.numerics import assert_close
from tilec.harness.reference import run

SOURCE = """
func causal_gqa(q: Tensor<bf16>[b, hk, g, s, d], k: Tensor<bf16>[b, hk, 1, t, d],
                v: Tensor<bf16>[b, hk, 1, t, d]) -> Tensor<bf16>[b, hk, g, s, d] {
  let scores = cast(q @ transpose(k, [0, 1, 2, 4, 3]), f32) * rsqrt(cast(dim(d), f32));
  let causal = where(iota([s, t], axis=1) <= iota([s, t], axis=0, start=t - s), scores, -inf);
  return cast(cast(softmax(causal, axis=-1), bf16) @ v, bf16);
}
func plain(q: Tensor[h, s, d], k: Tensor[h, t, d], v: Tensor[h, t, e]) -> Tensor[h, s, e] {
  return softmax(q @ transpose(k, [0, 2, 1]) * 0.125, axis=-1) @ v;
}
func lengths(q: Tensor[b, h, s, d], k: Tensor[b, h, t, d], v: Tensor[b, h, t, d],
             lens: Tensor<i32>[b, 1, 1, 1]) -> Tensor[b, h, s, d] {
  let scores = cast(q @ transpose(k, [0, 1, 3, 2]), f32) * rsqrt(cast(dim(d), f32));
  let p = softmax(where(iota([s, t], axis=1) < lens, scores, -inf), axis=-1);
  return cast(p, f16) @ v;
}
func biased(q: Tensor[h, s, d], k: Tensor[h, t, d], v: Tensor[h, t, d],
            bias: Tensor<f32>[h, s, t]) -> Tensor[h, s, d] {
  return cast(softmax(cast(q @ transpose(k, [0, 2, 1]), f32) + bias, axis=-1), f16) @ v;
}
func wide(q: Tensor[h, s, d], k: Tensor[h, t, d], v: Tensor[h, t, d]) -> Tensor<f32>[h, s, d] {
  return cast(softmax(q @ transpose(k, [0, 2, 1]), axis=-1) @ v, f32);
}
func plain32(q: Tensor<f32>[h, s, d], k: Tensor<f32>[h, t, d], v: Tensor<f32>[h, t, d])
    -> Tensor<f32>[h, s, d] {
  return softmax(q @ transpose(k, [0, 2, 1]) * 0.125, axis=-1) @ v;
}
"""

BF16 = ml_dtypes.bfloat16
F16 = np.float16
RNG = np.random.default_rng(20)


@pytest.fixture(scope="module")
def lib():
    return tilec.compile_string(SOURCE, "attention_cube.tile", target="ascend-sim")


def rand(shape, dtype=F16):
    return RNG.standard_normal(shape).astype(dtype)


def agrees(lib, name: str, *args) -> np.ndarray:
    got = getattr(lib, name)(*args)
    want = run(reference(SOURCE), name, *args)
    assert_close(got, want, want.dtype)
    return got


def test_half_and_bfloat16_attention_is_one_cube_kernel_float32_stays_unfused():
    sink = DiagnosticSink()
    plan = _plan(SOURCE, "ascend-sim", sink)
    assert {name: [s for s, _ in calls] for name, calls in plan.items()
            if name not in ("plain32", "wide")} == {n: ["attention"] for n in
                                       ("causal_gqa", "plain", "lengths", "biased")}
    assert plan["causal_gqa"][0][1] == {"causal": True, "diagonal": "-s+t"}
    for name in ("plain32", "wide"):
        assert "attention" not in [s for s, _ in plan[name]]
    assert [w.message for w in sink.warnings] == [
        "attention not fused: the result is float32: this target's fused attention rounds "
        "the probabilities to float16",
        "attention not fused: this target fuses attention of bfloat16 and float16 only, not "
        "float32"]


def test_the_kernel_multiplies_on_the_cube_and_hands_over_with_flags(tmp_path):
    from tilec.cli import main
    source, out = tmp_path / "attention_cube.tile", tmp_path / "attention_cube.asc"
    source.write_text(SOURCE)
    assert main([str(source), "--target", "ascend-sim", "--emit", "ascendc", "-o", str(out)]) == 0
    text = out.read_text()
    kernel = text[text.index("causal_gqa__k0: grid"):]
    kernel = kernel[:kernel.index("extern \"C\"")]
    for call in ("Mmad(acc, a2, b2, mm)", "Fixpipe<float, float, CFG_ROW_MAJOR>",
                 "CrossCoreSetFlag<2, PIPE_FIX>(0)", "CrossCoreSetFlag<2, PIPE_MTE3>(1)",
                 "CrossCoreSetFlag<2, PIPE_FIX>(2)", "ReduceMax(aRed, xb", "Exp(pb, pb"):
        assert call in kernel, call
    assert "KERNEL_TYPE_MIX_AIC_1_2" in text


@pytest.mark.parametrize("s,t,d", [(1, 1, 64), (17, 255, 64), (255, 17, 128), (255, 255, 64),
                                   (17, 17, 128)])
def test_causal_grouped_query_bf16(lib, s, t, d):
    q = rand((1, 2, 3, s, d), BF16)
    k, v = rand((1, 2, 1, t, d), BF16), rand((1, 2, 1, t, d), BF16)
    got = agrees(lib, "causal_gqa", q, k, v)
    assert np.isnan(got.astype(np.float32)).any() == (s > t)


@pytest.mark.parametrize("s,t,d,e", [(17, 255, 128, 64), (255, 1, 64, 128), (1, 17, 64, 17)])
def test_non_causal_half(lib, s, t, d, e):
    agrees(lib, "plain", rand((2, s, d)), rand((2, t, d)), rand((2, t, e)))


def test_masked_by_lengths_with_a_row_that_sees_nothing(lib):
    s, t, d = 17, 255, 64
    lens = np.array([0, 1, 130, 255], np.int32).reshape(4, 1, 1, 1)
    got = agrees(lib, "lengths", rand((4, 2, s, d)), rand((4, 2, t, d)), rand((4, 2, t, d)),
                 lens)
    assert np.isnan(got[0]).all() and not np.isnan(got[1:]).any()


@pytest.mark.parametrize("s,t", [(1, 255), (255, 17)])
def test_additive_bias(lib, s, t):
    agrees(lib, "biased", rand((2, s, 64)), rand((2, t, 64)), rand((2, t, 64)),
           rand((2, s, t), np.float32))


@pytest.mark.parametrize("s", [1, 4])
def test_decode(lib, s):
    """A handful of query rows against 255 keys, grouped-query (8 query heads per key
    head), causal."""
    q = rand((1, 1, 8, s, 128), BF16)
    k, v = rand((1, 1, 1, 255, 128), BF16), rand((1, 1, 1, 255, 128), BF16)
    agrees(lib, "causal_gqa", q, k, v)


def test_float32_runs_the_unfused_kernels(lib):
    agrees(lib, "plain32", rand((1, 7, 16), np.float32), rand((1, 17, 16), np.float32),
           rand((1, 17, 16), np.float32))


def test_a_float32_result_of_half_attention_runs_unfused_within_float32s_tolerance(lib):
    """The fused kernel's P is rounded to half relative to the running max: a float32 result
    would show it (2398 of 8704 elements beyond rtol 1e-4 when it was fused)."""
    agrees(lib, "wide", rand((2, 17, 64)), rand((2, 255, 64)), rand((2, 255, 64)))


def test_value_rows_beyond_the_accumulator_are_refused_with_the_reason(lib):
    with pytest.raises(RuntimeError, match="value rows longer than 256"):
        lib.plain(rand((1, 1, 16)), rand((1, 1, 16)), rand((1, 1, 257)))
